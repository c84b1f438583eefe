// A stage on a site of several ranks, in one process: the ranks' Gloo group (real TCP on loopback,
// rendezvous through a MemoryRendezvousStore), the hierarchical cross-rank reducer, and the
// leader's StageExecutor mirroring its calls to followers that Serve them (each follower on a
// thread of its own behind LocalRankPeers; strait-site puts a gRPC stream there). Two
// ranks of one worker give the bits of one process of two workers; more give them up to float
// order.
#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "site/backend/counter_rng.h"
#include "site/collective/all_reducer.h"
#include "site/collective/gloo_group.h"
#include "site/collective/rendezvous_store.h"
#include "site/pipeline/local_rank_peers.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {
namespace {

ModelSpec Mlp() {
  ModelSpec m;
  m.family = ModelFamily::kMlp;
  m.mlp.input = 20;
  m.mlp.hidden = {16, 12, 12, 8};  // 5 layers
  m.mlp.classes = 4;
  m.mlp.activation = Activation::kGelu;
  m.mlp.dropout = 0.1f;
  m.init_seed = 11;
  return m;
}

OptimizerSpec AdamW() {
  OptimizerSpec o;
  o.kind = OptimizerKind::kAdamW;
  o.lr = 0.01;
  o.weight_decay = 0.01;
  return o;
}

std::unique_ptr<LocalRankSite> MakeSite(int ranks, int workers) {
  auto site = LocalRankSite::Create(Mlp(), {0, 5}, AdamW(), 6, {}, ranks, {.count = workers});
  EXPECT_TRUE(site.ok()) << site.status();
  return *std::move(site);
}

std::unique_ptr<StageExecutor> MakeProcess(int workers) {
  auto stage = StageExecutor::Create(Mlp(), {0, 5}, AdamW(), 6, {}, {.count = workers});
  EXPECT_TRUE(stage.ok()) << stage.status();
  return *std::move(stage);
}

struct Trace {
  std::vector<float> logits, grad_inputs, params;
  double loss = 0;
};

// Steps of 3 microbatches of 6 rows (the last of 5), GPipe order, with global-norm clipping.
Trace Train(StageExecutor& s, int steps) {
  Trace t;
  for (int64_t step = 0; step < steps; ++step) {
    s.ZeroGrad(step);
    for (int m = 0; m < 3; ++m) {
      const int n = m == 2 ? 5 : 6;
      std::vector<float> x(n * s.input_features()), y(n * s.output_features());
      for (size_t i = 0; i < x.size(); ++i) x[i] = 2 * CounterUniform(CombineKey(step, m), i) - 1;
      EXPECT_TRUE(s.Forward(step, m, n, x.data(), y.data()).ok());
      t.logits.insert(t.logits.end(), y.begin(), y.end());
      std::vector<int32_t> labels(n);
      for (int i = 0; i < n; ++i) labels[i] = (i + m + static_cast<int>(step)) % 4;
      absl::StatusOr<LossResult> loss = s.Loss(m, labels.data(), 1.0f / 17);
      EXPECT_TRUE(loss.ok()) << loss.status();
      t.loss += loss->loss_sum;
    }
    for (int m = 0; m < 3; ++m) {
      std::vector<float> dx((m == 2 ? 5 : 6) * s.input_features());
      absl::Status b = s.Backward(m, nullptr, dx.data(), m == 2);
      EXPECT_TRUE(b.ok()) << b;
      t.grad_inputs.insert(t.grad_inputs.end(), dx.begin(), dx.end());
    }
    EXPECT_TRUE(
        s.OptimizerStep(step + 1, GlobalNormClipScale(*s.GradSumSquares(0, step), 0.5)).ok());
  }
  t.params = *s.Params();
  return t;
}

TEST(GlooGroupTest, SumsAcrossRanks) {
  auto groups = *GlooGroup::ConnectInProcess(3);
  std::vector<std::vector<float>> data(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    data[r] = {1.0f * r, 10.0f + r, 0.5f};
    threads.emplace_back(
        [&, r] { EXPECT_TRUE(groups[r]->AllReduceSum(data[r].data(), 3, 7).ok()); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 3; ++r) EXPECT_EQ(data[r], (std::vector<float>{3.0f, 33.0f, 1.5f}));
}

TEST(GlooGroupTest, RendezvousTimesOutWhenARankNeverComes) {
  MemoryRendezvousStore store;
  auto g = GlooGroup::Connect(
      store, {.rank = 0, .size = 2, .prefix = "alone/", .timeout = std::chrono::milliseconds(300)});
  EXPECT_FALSE(g.ok());
}

TEST(RankStageTest, TwoRanksOfOneWorkerAreBitIdenticalToOneProcessOfTwo) {
  auto site = MakeSite(2, 1);
  auto process = MakeProcess(2);
  const Trace a = Train(site->leader(), 3), b = Train(*process, 3);
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(a.grad_inputs, b.grad_inputs);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.params, b.params);
  // The follower holds the leader's weights.
  EXPECT_EQ(*site->stages[1]->Params(), a.params);
}

TEST(RankStageTest, MoreRanksAndWorkersMatchOneProcessUpToFloatOrder) {
  auto site = MakeSite(3, 2);
  auto process = MakeProcess(6);
  const Trace a = Train(site->leader(), 3), b = Train(*process, 3);
  EXPECT_EQ(a.logits.size(), b.logits.size());
  EXPECT_NEAR(a.loss, b.loss, 1e-9 * std::abs(b.loss) + 1e-6);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    ASSERT_NEAR(a.params[i], b.params[i], 1e-5f * (1 + std::abs(b.params[i]))) << i;
  }
  for (int r = 1; r < 3; ++r) EXPECT_EQ(*site->stages[r]->Params(), a.params);
}

TEST(RankStageTest, RestoredStateReachesEveryRank) {
  auto site = MakeSite(2, 1);
  auto process = MakeProcess(1);
  Train(*process, 2);
  ASSERT_TRUE(site->leader().SetParams(*process->Params()).ok());
  ASSERT_TRUE(site->leader().SetOptimizerState(*process->OptimizerState()).ok());
  EXPECT_EQ(*site->stages[1]->Params(), *process->Params());
  EXPECT_EQ(*site->stages[1]->OptimizerState(), *process->OptimizerState());
}

TEST(RankStageTest, OnlyTheLeaderOfSeveralRanksHasFollowers) {
  EXPECT_FALSE(StageExecutor::Create(Mlp(), {0, 5}, AdamW(), 6, {}, {.rank = 0, .ranks = 2}).ok());
  EXPECT_FALSE(StageExecutor::Create(Mlp(), {0, 5}, AdamW(), 6, {}, {.rank = 2, .ranks = 2}).ok());
}

TEST(RankStageTest, AFollowerRefusesRowsThatDoNotFit) {
  auto stage = StageExecutor::Create(Mlp(), {0, 5}, AdamW(), 6, {}, {.rank = 1, .ranks = 2});
  ASSERT_TRUE(stage.ok());
  RankCall call{.op = RankOp::kForward, .rows = 6};
  call.values.resize(5);  // Not 3 rows of 20.
  EXPECT_EQ((*stage)->Serve(call).status().code(), absl::StatusCode::kInvalidArgument);
  call.rows = 99;
  EXPECT_EQ((*stage)->Serve(call).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE((*stage)->Serve({.op = RankOp::kBackward, .microbatch = 4}).ok());
}

}  // namespace
}  // namespace strait::site
