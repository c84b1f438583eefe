// WeightHistory: which arena each version lives in, the update that keeps the previous version,
// the lookahead extrapolated once per update, restoring, and its contract errors.
#include "site/pipeline/weight_history.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "site/backend/cpu/cpu_backend.h"

namespace strait::site {
namespace {

ModelSpec Mlp() {
  ModelSpec m;
  m.family = ModelFamily::kMlp;
  m.mlp.input = 6;
  m.mlp.hidden = {5};
  m.mlp.classes = 3;
  m.init_seed = 4;
  return m;
}

// The weights that Views(version) points layer 0's first parameter at, as a host copy.
std::vector<float> WeightsOf(const WeightHistory& h, const Stage& stage, int64_t version) {
  auto views = h.Views(version, 0, "test");
  EXPECT_TRUE(views.ok()) << views.status();
  std::vector<float> out(stage.param_count());
  stage.backend().CopyToHost(out.data(), (**views)[0].value[0], sizeof(float) * out.size());
  return out;
}

class WeightHistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = *CreateCpuBackend(1);
    stage_ = *Stage::Create(Mlp(), {0, 2}, 4, backend_.get());
    OptimizerSpec sgd;
    sgd.kind = OptimizerKind::kSgd;
    sgd.lr = 0.5;
    sgd.momentum = 0.0;
    optimizer_ = *Optimizer::Create(sgd, stage_->param_count(), backend_.get());
  }
  // Writes `value` into every element of the gradient arena of `step`.
  void SetGrads(const WeightHistory& h, int64_t step, float value) {
    backend_->Fill(h.grads(step), stage_->param_count(), value);
  }

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Stage> stage_;
  std::unique_ptr<Optimizer> optimizer_;
};

TEST_F(WeightHistoryTest, OneVersionUpdatesInPlace) {
  auto h = *WeightHistory::Create(*stage_, {});
  const std::vector<float> l0 = stage_->InitialParams().value();
  EXPECT_EQ(*h->Newest(), l0);
  EXPECT_EQ(*h->Grads(0), std::vector<float>(l0.size(), 0.0f));
  SetGrads(*h, 0, 1.0f);
  ASSERT_TRUE(h->Update(1, *optimizer_, 0.5f).ok());  // SGD: L_1 = L_0 - 0.5 * 0.5 * 1
  EXPECT_EQ(h->newest(), 1);
  const std::vector<float> l1 = *h->Newest();
  for (size_t i = 0; i < l0.size(); ++i) ASSERT_EQ(l1[i], l0[i] - 0.25f) << i;
  EXPECT_EQ(WeightsOf(*h, *stage_, kNewestWeights), l1);
  EXPECT_EQ(h->Views(0, 0, "Forward").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(h->SurvivesUpdate(0));  // One version: nothing to check.
  EXPECT_EQ(h->Previous().status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(h->Lookahead().status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(WeightHistoryTest, TwoVersionsKeepThePreviousAndGradientsByStepParity) {
  auto h = *WeightHistory::Create(*stage_, {2, 0.0f});
  const std::vector<float> l0 = stage_->InitialParams().value();
  EXPECT_EQ(*h->Previous(), l0);  // L_0 while k = 0
  EXPECT_NE(h->grads(0), h->grads(1));
  EXPECT_EQ(h->grads(0), h->grads(2));
  SetGrads(*h, 0, 1.0f);
  SetGrads(*h, 1, 2.0f);
  ASSERT_TRUE(h->Update(1, *optimizer_, 1.0f).ok());  // from g_0
  const std::vector<float> l1 = *h->Newest();
  EXPECT_EQ(*h->Previous(), l0);
  EXPECT_EQ(WeightsOf(*h, *stage_, 0), l0);
  EXPECT_EQ(WeightsOf(*h, *stage_, 1), l1);
  EXPECT_TRUE(h->SurvivesUpdate(1));
  EXPECT_FALSE(h->SurvivesUpdate(0));
  ASSERT_TRUE(h->Update(2, *optimizer_, 1.0f).ok());  // from g_1
  const std::vector<float> l2 = *h->Newest();
  for (size_t i = 0; i < l0.size(); ++i) ASSERT_EQ(l2[i], l1[i] - 1.0f) << i;
  EXPECT_EQ(*h->Previous(), l1);
  EXPECT_EQ(WeightsOf(*h, *stage_, 1), l1);
  absl::Status dropped = h->Views(0, 2, "Forward").status();
  EXPECT_EQ(dropped.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(dropped.message()),
              ::testing::HasSubstr("Forward with weights L_0, which this stage does not hold "
                                   "(newest: L_2, previous: L_1)"));
  // Views pair the version's weights with the gradient arena of the step.
  EXPECT_EQ((**h->Views(1, 3, "test"))[0].grad[0], h->grads(3));
  EXPECT_EQ((**h->Views(2, 2, "test"))[0].grad[0], h->grads(2));
}

// Dropping stale gradients: a microbatch of step t computing with L_{t-1} writes its gradients to
// the arena of step t - 1 (already applied, zeroed before step t + 1), the newest to step t's.
TEST_F(WeightHistoryTest, DroppedStaleGradientsGoToTheAppliedArena) {
  auto h = *WeightHistory::Create(*stage_, {2, 0.0f, /*drop_stale=*/true});
  ASSERT_TRUE(h->Update(1, *optimizer_, 1.0f).ok());  // L_1; step 1's stale microbatches use L_0
  EXPECT_EQ((**h->Views(0, 1, "test"))[0].grad[0], h->grads(0));
  EXPECT_EQ((**h->Views(1, 1, "test"))[0].grad[0], h->grads(1));
  EXPECT_EQ((**h->Views(kNewestWeights, 1, "test"))[0].grad[0], h->grads(1));
  auto kept = *WeightHistory::Create(*stage_, {2, 0.0f});
  ASSERT_TRUE(kept->Update(1, *optimizer_, 1.0f).ok());
  EXPECT_EQ((**kept->Views(0, 1, "test"))[0].grad[0], kept->grads(1));
}

// P_k = L_k + c (L_k - L_{k-1}), computed as Backend::Axpby does, once per update.
TEST_F(WeightHistoryTest, LookaheadExtrapolatesAlongTheLastUpdate) {
  const float c = 2.0f;
  auto h = *WeightHistory::Create(*stage_, {2, c});
  const std::vector<float> l0 = stage_->InitialParams().value();
  EXPECT_EQ(*h->Lookahead(), l0);  // P_0 = L_0
  EXPECT_EQ(WeightsOf(*h, *stage_, 0), l0);
  std::vector<float> previous_p = l0, newest = l0;
  for (int64_t k = 1; k <= 3; ++k) {
    SCOPED_TRACE(testing::Message() << "update " << k);
    SetGrads(*h, k - 1, 0.1f * static_cast<float>(k));
    ASSERT_TRUE(h->Update(k, *optimizer_, 1.0f).ok());
    const std::vector<float> before = newest;
    newest = *h->Newest();
    std::vector<float> p(newest.size());
    for (size_t i = 0; i < p.size(); ++i) {
      const float a = (1.0f + c) * newest[i], b = -c * before[i];
      p[i] = a + b;
    }
    EXPECT_EQ(*h->Lookahead(), p);
    EXPECT_EQ(WeightsOf(*h, *stage_, k), p);               // microbatches of L_k use P_k
    EXPECT_EQ(WeightsOf(*h, *stage_, k - 1), previous_p);  // and those of L_{k-1} P_{k-1}
    EXPECT_EQ(*h->Previous(), previous_p);
    previous_p = p;
  }
}

TEST_F(WeightHistoryTest, RestoreAndContractErrors) {
  EXPECT_EQ(WeightHistory::Create(*stage_, {3, 0.0f}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WeightHistory::Create(*stage_, {1, 1.0f}).status().code(),
            absl::StatusCode::kInvalidArgument);  // lookahead needs two versions
  EXPECT_EQ(WeightHistory::Create(*stage_, {2, -1.0f}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto h = *WeightHistory::Create(*stage_, {2, 1.0f});
  const std::vector<float> a(stage_->param_count(), 0.5f), b(a.size(), 0.25f), p(a.size(), 2.0f);
  EXPECT_EQ(h->Restore(4, a, b, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(h->SetNewest(std::vector<float>(3)).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(h->Restore(4, a, b, p).ok());
  EXPECT_EQ(h->newest(), 4);
  EXPECT_EQ(*h->Newest(), a);
  EXPECT_EQ(*h->Previous(), b);
  EXPECT_EQ(*h->Lookahead(), p);
  EXPECT_EQ(WeightsOf(*h, *stage_, 3), b);
  EXPECT_EQ(WeightsOf(*h, *stage_, 4), p);
}

TEST(WeightVersioningTest, FollowsTheSchedule) {
  TrainingSpec t;
  t.schedule = Schedule::k1F1B;
  t.lookahead = 2.0;
  EXPECT_EQ(VersioningOf(t).versions, 1);
  EXPECT_EQ(VersioningOf(t).lookahead, 0.0f);
  t.schedule = Schedule::k2BW;
  EXPECT_EQ(VersioningOf(t).versions, 2);
  EXPECT_EQ(VersioningOf(t).lookahead, 2.0f);
  EXPECT_FALSE(VersioningOf(t).drop_stale);
  t.stale_gradients = StaleGradients::kDrop;  // Eager only.
  EXPECT_FALSE(VersioningOf(t).drop_stale);
  t.update = UpdateTiming::kEager;
  EXPECT_TRUE(VersioningOf(t).drop_stale);
}

}  // namespace
}  // namespace strait::site
