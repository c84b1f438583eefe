// A stage on a site of several ranks, in one process: the ranks' Gloo group (real TCP on loopback,
// rendezvous through a MemoryRendezvousStore), the hierarchical cross-rank reducer, and the
// leader's StageExecutor mirroring its calls to FollowerStages that Serve them (each follower on a
// thread of its own behind LocalRankPeers; strait-site puts a gRPC stream there). Two
// ranks of one worker give the bits of one process of two workers; more give them up to float
// order.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "site/backend/counter_rng.h"
#include "site/collective/all_reducer.h"
#include "site/collective/gloo_group.h"
#include "site/collective/rendezvous_store.h"
#include "site/pipeline/follower_stage.h"
#include "site/pipeline/local_rank_peers.h"
#include "site/pipeline/stage_executor.h"
#include "tests/unit/collective/test_pipeline.h"

namespace strait::site {
namespace {

using harness::Mlp;
using harness::Vit;

OptimizerSpec Optimizer(OptimizerKind kind, double lr) {
  OptimizerSpec o;
  o.kind = kind;
  o.lr = lr;
  o.weight_decay = 0.01;
  return o;
}
OptimizerSpec AdamW() { return Optimizer(OptimizerKind::kAdamW, 0.01); }

std::unique_ptr<LocalRankSite> MakeSite(int ranks, int workers) {
  auto site =
      LocalRankSite::Create(Mlp(), {0, 5}, AdamW(), 6, {}, {.count = workers, .ranks = ranks});
  EXPECT_TRUE(site.ok()) << site.status();
  return *std::move(site);
}

std::unique_ptr<StageExecutor> MakeProcess(int workers) {
  auto stage = StageExecutor::Create(Mlp(), {0, 5}, AdamW(), 6, {}, {.count = workers});
  EXPECT_TRUE(stage.ok()) << stage.status();
  return *std::move(stage);
}

ModelSpec Gpt() {
  ModelSpec m;
  m.family = ModelFamily::kGpt;
  m.gpt.vocab = 16;
  m.gpt.context = 6;
  m.gpt.dim = 16;
  m.gpt.depth = 2;  // 4 layers
  m.gpt.heads = 4;
  m.gpt.mlp_dim = 32;
  m.gpt.dropout = 0.1f;
  m.gpt.tie_embeddings = true;
  m.init_seed = 9;
  return m;
}

// A llama whose 4 query heads share 2 key/value heads: each of 2 ranks holds 2 and 1.
ModelSpec Llama() {
  ModelSpec m = Gpt();
  m.family = ModelFamily::kLlama;
  m.gpt.kv_heads = 2;
  m.gpt.mlp_dim = 24;
  return m;
}

struct Trace {
  std::vector<float> logits, grad_inputs, params;
  double loss = 0;
};

// Steps of 3 microbatches of 6 rows (the last of 5), GPipe order, with global-norm clipping, on
// inputs in [-1, 1) (token ids below the vocabulary for a language model).
Trace Train(StageExecutor& s, const ModelSpec& model, int steps) {
  Trace t;
  const int targets = model.TargetsPerSample(), classes = model.IsLanguageModel() ? model.gpt.vocab
                                                          : model.family == ModelFamily::kVit
                                                              ? model.vit.classes
                                                              : model.mlp.classes;
  for (int64_t step = 0; step < steps; ++step) {
    s.ZeroGrad(step);
    for (int m = 0; m < 3; ++m) {
      const int n = m == 2 ? 5 : 6;
      std::vector<float> x(n * s.input_features()), y(n * s.output_features());
      for (size_t i = 0; i < x.size(); ++i) {
        const float u = CounterUniform(CombineKey(step, m), i);
        x[i] = model.IsLanguageModel() ? std::floor(u * classes) : 2 * u - 1;
      }
      EXPECT_TRUE(s.Forward(step, m, n, x.data(), y.data()).ok());
      t.logits.insert(t.logits.end(), y.begin(), y.end());
      std::vector<int32_t> labels(n * targets);
      for (int i = 0; i < n * targets; ++i) labels[i] = (i + m + static_cast<int>(step)) % classes;
      absl::StatusOr<LossResult> loss = s.Loss(m, labels.data(), 1.0f / (17 * targets));
      EXPECT_TRUE(loss.ok()) << loss.status();
      t.loss += loss->loss_sum;
    }
    for (int m = 0; m < 3; ++m) {
      std::vector<float> dx((m == 2 ? 5 : 6) * s.input_features());
      absl::Status b = s.Backward(m, nullptr, dx.data(), m == 2);
      EXPECT_TRUE(b.ok()) << b;
      t.grad_inputs.insert(t.grad_inputs.end(), dx.begin(), dx.end());
    }
    if (!s.TiedGrad(step)->empty()) {
      EXPECT_TRUE(s.TieLocalGrads(step).ok());
    }
    EXPECT_TRUE(
        s.OptimizerStep(step + 1, GlobalNormClipScale(*s.GradSumSquares(0, step), 0.5)).ok());
  }
  t.params = *s.Params();
  return t;
}
Trace Train(StageExecutor& s, int steps) { return Train(s, Mlp(), steps); }

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
  EXPECT_EQ(*site->follower(1).Params(), a.params);
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
  for (int r = 1; r < 3; ++r) EXPECT_EQ(*site->follower(r).Params(), a.params);
}

TEST(RankStageTest, RestoredStateReachesEveryRank) {
  auto site = MakeSite(2, 1);
  auto process = MakeProcess(1);
  Train(*process, 2);
  ASSERT_TRUE(site->leader().SetParams(*process->Params()).ok());
  ASSERT_TRUE(site->leader().SetOptimizerState(*process->OptimizerState()).ok());
  EXPECT_EQ(*site->follower(1).Params(), *process->Params());
  EXPECT_EQ(*site->follower(1).OptimizerState(), *process->OptimizerState());
}

TEST(RankStageTest, OnlyTheLeaderOfSeveralRanksHasFollowers) {
  EXPECT_FALSE(StageExecutor::Create(Mlp(), {0, 5}, AdamW(), 6, {}, {.rank = 0, .ranks = 2}).ok());
  EXPECT_FALSE(StageExecutor::Create(Mlp(), {0, 5}, AdamW(), 6, {}, {.rank = 2, .ranks = 2}).ok());
  // A follower's stage serves its leader's calls; the leader's is a StageExecutor.
  EXPECT_FALSE(StageExecutor::Create(Mlp(), {0, 5}, AdamW(), 6, {}, {.rank = 1, .ranks = 2}).ok());
  EXPECT_FALSE(FollowerStage::Create(Mlp(), {0, 5}, AdamW(), 6, {}, {}).ok());
}

TEST(RankStageTest, AFollowerRefusesRowsThatDoNotFit) {
  auto stage = FollowerStage::Create(Mlp(), {0, 5}, AdamW(), 6, {}, {.rank = 1, .ranks = 2});
  ASSERT_TRUE(stage.ok());
  RankCall call{.op = RankOp::kForward, .rows = 6};
  call.values.resize(5);  // Not 3 rows of 20.
  EXPECT_EQ((*stage)->Serve(call).status().code(), absl::StatusCode::kInvalidArgument);
  call.rows = 99;
  EXPECT_EQ((*stage)->Serve(call).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE((*stage)->Serve({.op = RankOp::kBackward, .microbatch = 4}).ok());
}

// ||a - b|| / ||b|| (||a - b|| when b is 0: a token embedding has no input gradient).
double Relative(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    norm += double{b[i]} * b[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// SGD with momentum: AdamW would turn the float-order noise of a gradient that is zero in exact
// arithmetic (an attention key bias: softmax ignores a constant) into whole steps of lr.
OptimizerSpec Sgd() { return Optimizer(OptimizerKind::kSgd, 0.05); }

// `ranks` ranks, `tensor` of them splitting every layer, against one process of one worker; the
// same bits on a second run.
void ExpectTensorParallelLikeOneProcess(const ModelSpec& model, int ranks, int tensor,
                                        const OptimizerSpec& optimizer = Sgd()) {
  const LayerRange all{0, model.NumLayers()};
  auto process = StageExecutor::Create(model, all, optimizer, 6, {}, {});
  ASSERT_TRUE(process.ok()) << process.status();
  const Trace want = Train(**process, model, 3);
  Trace got[2];
  for (Trace& t : got) {
    auto site = LocalRankSite::Create(model, all, optimizer, 6, {},
                                      {.ranks = ranks, .tensor_parallel = tensor});
    ASSERT_TRUE(site.ok()) << site.status();
    EXPECT_EQ((*site)->leader().param_count(), (*process)->param_count());
    t = Train((*site)->leader(), model, 3);
  }
  EXPECT_LT(Relative(got[0].logits, want.logits), 1e-5);
  EXPECT_LT(Relative(got[0].grad_inputs, want.grad_inputs), 1e-5);
  EXPECT_LT(Relative(got[0].params, want.params), 1e-5);
  EXPECT_NEAR(got[0].loss, want.loss, 1e-5 * want.loss);
  EXPECT_EQ(got[0].params, got[1].params);  // The same bits on every run.
  EXPECT_EQ(got[0].loss, got[1].loss);
}

TEST(TensorParallelTest, MlpOnTwoRanksMatchesOneProcess) {
  ExpectTensorParallelLikeOneProcess(Mlp(), 2, 2);
  ExpectTensorParallelLikeOneProcess(Mlp(), 2, 2, AdamW());
}
TEST(TensorParallelTest, VitOnTwoRanksMatchesOneProcess) {
  ExpectTensorParallelLikeOneProcess(Vit(), 2, 2);
}
TEST(TensorParallelTest, GptOnTwoRanksMatchesOneProcess) {
  ExpectTensorParallelLikeOneProcess(Gpt(), 2, 2);
}
TEST(TensorParallelTest, LlamaOnTwoRanksMatchesOneProcess) {
  ExpectTensorParallelLikeOneProcess(Llama(), 2, 2);
}
// machines = tensor_parallel x replicas: two replicas of two tensor ranks.

TEST(TensorParallelTest, TwoReplicasOfTwoTensorRanksMatchOneProcess) {
  ExpectTensorParallelLikeOneProcess(Mlp(), 4, 2);
  ExpectTensorParallelLikeOneProcess(Gpt(), 4, 2);
}

TEST(TensorParallelTest, RestoredWholeStateReachesEveryShard) {
  auto process = MakeProcess(1);
  Train(*process, 2);
  auto site =
      LocalRankSite::Create(Mlp(), {0, 5}, AdamW(), 6, {}, {.ranks = 2, .tensor_parallel = 2});
  ASSERT_TRUE(site.ok()) << site.status();
  StageExecutor& leader = (*site)->leader();
  ASSERT_TRUE(leader.SetParams(*process->Params()).ok());
  ASSERT_TRUE(leader.SetOptimizerState(*process->OptimizerState()).ok());
  EXPECT_EQ(*leader.Params(), *process->Params());
  EXPECT_EQ(*leader.OptimizerState(), *process->OptimizerState());
  // The follower holds its shards only.
  EXPECT_LT((*site)->follower(1).Params()->size(), process->Params()->size());
}

}  // namespace
}  // namespace strait::site
