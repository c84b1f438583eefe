// DiLoCo's outer step (site/nn/outer_optimizer.h) against its formula, and as FedAvg with lr 1 and
// no momentum.
#include "site/nn/outer_optimizer.h"

#include <gtest/gtest.h>

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

TEST(OuterOptimizerTest, RefusesOtherLengths) {
  OuterOptimizer outer(0.7f, 0.9f, 2);
  std::vector<float> params = {1.0f, 2.0f};
  EXPECT_FALSE(outer.Step(std::vector<float>{0.1f}, params).ok());
  EXPECT_FALSE(outer.SetMomentum(std::vector<float>{0.1f, 0.2f, 0.3f}).ok());
}

}  // namespace
}  // namespace strait::site
