// DiLoCo's outer step (site/nn/outer_optimizer.h) against its formula, and as FedAvg with lr 1 and
// no momentum.
#include "site/nn/outer_optimizer.h"

#include <gtest/gtest.h>

#include <span>
#include <vector>

namespace strait::site {
namespace {

TEST(OuterOptimizerTest, LrOneWithoutMomentumAveragesTheReplicas) {
  const std::vector<float> start = {1.0f, -2.0f, 0.5f};
  const std::vector<std::vector<float>> now = {{0.5f, -1.0f, 0.5f}, {1.5f, -2.5f, 0.25f}};
  std::vector<float> delta(3, 0.0f);
  for (const std::vector<float>& r : now) {
    for (size_t i = 0; i < 3; ++i) delta[i] += (start[i] - r[i]) / 2;
  }
  OuterOptimizer outer(1.0f, 0.0f, 3);
  std::vector<float> params = start;
  ASSERT_TRUE(outer.Step(delta, params).ok());
  for (size_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(params[i], (now[0][i] + now[1][i]) / 2) << i;
}

TEST(OuterOptimizerTest, NesterovMomentumAsPyTorchComputesIt) {
  OuterOptimizer outer(0.7f, 0.9f, 1);
  std::vector<float> params = {1.0f};
  float v = 0.0f, p = 1.0f;
  for (float delta : {0.1f, -0.05f, 0.2f}) {
    ASSERT_TRUE(outer.Step(std::vector<float>{delta}, params).ok());
    v = 0.9f * v + delta;
    p -= 0.7f * (delta + 0.9f * v);
    EXPECT_EQ(params[0], p);
    EXPECT_EQ(outer.momentum_buffer()[0], v);
  }
  // A checkpoint's momentum restores the next step exactly.
  OuterOptimizer again(0.7f, 0.9f, 1);
  ASSERT_TRUE(again.SetMomentum(outer.momentum_buffer()).ok());
  std::vector<float> a = params, b = params;
  ASSERT_TRUE(outer.Step(std::vector<float>{0.3f}, a).ok());
  ASSERT_TRUE(again.Step(std::vector<float>{0.3f}, b).ok());
  EXPECT_EQ(a, b);
}

// A fragment's step moves its values and their momentum as the whole step would, and nothing else.
TEST(OuterOptimizerTest, AStepOverARangeIsTheWholeStepThere) {
  OuterOptimizer whole(0.7f, 0.9f, 5), part(0.7f, 0.9f, 5);
  std::vector<float> a = {1, 2, 3, 4, 5}, b = a;
  const std::vector<float> delta = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f};
  ASSERT_TRUE(whole.Step(delta, a).ok());
  ASSERT_TRUE(part.StepAt(1, std::span(delta).subspan(1, 3), std::span(b).subspan(1, 3)).ok());
  EXPECT_EQ(b, (std::vector<float>{1, a[1], a[2], a[3], 5}));
  EXPECT_EQ(part.momentum_buffer(),
            (std::vector<float>{0, whole.momentum_buffer()[1], whole.momentum_buffer()[2],
                                whole.momentum_buffer()[3], 0}));
  EXPECT_FALSE(part.StepAt(3, std::span(delta).first(3), std::span(b).first(3)).ok());
}

TEST(OuterOptimizerTest, RefusesOtherLengths) {
  OuterOptimizer outer(0.7f, 0.9f, 2);
  std::vector<float> params = {1.0f, 2.0f};
  EXPECT_FALSE(outer.Step(std::vector<float>{0.1f}, params).ok());
  EXPECT_FALSE(outer.SetMomentum(std::vector<float>{0.1f, 0.2f, 0.3f}).ok());
}

}  // namespace
}  // namespace strait::site
