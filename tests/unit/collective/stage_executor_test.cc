// StageExecutor against a single Stage on the same data (DESIGN.md §4): W = 2 and 3 agree within
// float reduction order, W = 1 is bit-identical, the same W twice is bit-identical, and
// microbatches with fewer rows than workers work.
#include "site/pipeline/stage_executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "site/backend/backend_factory.h"
#include "site/backend/counter_rng.h"
#include "tests/unit/collective/test_pipeline.h"

namespace strait::site {
namespace {

using namespace ::strait::site::harness;  // NOLINT: the shared harness
void ExpectCloseToStage(const ModelSpec& model, const std::vector<LayerRange>& ranges,
                        const std::vector<int>& workers, OptimizerKind opt,
                        const std::vector<int>& sizes) {
  Pipeline reference =
      Make(model, ranges, std::vector<int>(ranges.size(), 0), opt, DeviceKind::kCpu, 1);
  Pipeline group = Make(model, ranges, workers, opt, DeviceKind::kCpu, 1);
  for (int64_t step = 0; step < 3; ++step) {
    StepOutcome a = RunStep(reference, step, sizes), b = RunStep(group, step, sizes);
    EXPECT_LT(RelativeDifference(b.outputs, a.outputs), 1e-5) << "step " << step;
    EXPECT_LT(RelativeDifference(b.params, a.params), 1e-5) << "step " << step;
    EXPECT_NEAR(b.loss, a.loss, 1e-5 * a.loss) << "step " << step;
    EXPECT_EQ(b.correct, a.correct) << "step " << step;
    EXPECT_NEAR(b.grad_sum_squares, a.grad_sum_squares, 1e-5 * a.grad_sum_squares);
  }
}

TEST(StageExecutorTest, MlpTwoWorkersMatchesStage) {
  ExpectCloseToStage(Mlp(), {{0, 5}}, {2}, OptimizerKind::kSgd, {6, 5, 6});
}

TEST(StageExecutorTest, MlpThreeWorkersMatchesStage) {
  ExpectCloseToStage(Mlp(), {{0, 5}}, {3}, OptimizerKind::kSgd, {6, 4, 5});
}

TEST(StageExecutorTest, MlpSplitPipelineWithMixedWorkers) {
  // Sites with 1, 2 and 3 workers next to each other (the "mixed workers").
  ExpectCloseToStage(Mlp(), {{0, 2}, {2, 4}, {4, 5}}, {1, 2, 3}, OptimizerKind::kSgd, {6, 6});
}

TEST(StageExecutorTest, VitTwoWorkersMatchesStage) {
  ExpectCloseToStage(Vit(), {{0, 5}}, {2}, OptimizerKind::kSgd, {6, 5});
}

TEST(StageExecutorTest, VitThreeWorkersSplitPipelineMatchesStage) {
  ExpectCloseToStage(Vit(), {{0, 2}, {2, 5}}, {3, 2}, OptimizerKind::kSgd, {6, 4});
}

TEST(StageExecutorTest, FewerRowsThanWorkers) {
  ExpectCloseToStage(Mlp(), {{0, 5}}, {3}, OptimizerKind::kSgd, {2, 1, 6});
  ExpectCloseToStage(Vit(), {{0, 5}}, {3}, OptimizerKind::kSgd, {1, 2});
}

void ExpectBitIdentical(Pipeline& a, Pipeline& b, const std::vector<int>& sizes) {
  for (int64_t step = 0; step < 3; ++step) {
    StepOutcome x = RunStep(a, step, sizes), y = RunStep(b, step, sizes);
    ASSERT_EQ(x.outputs, y.outputs) << "step " << step;
    ASSERT_EQ(x.params, y.params) << "step " << step;
    ASSERT_EQ(x.loss, y.loss) << "step " << step;
    ASSERT_EQ(x.grad_sum_squares, y.grad_sum_squares) << "step " << step;
  }
}

TEST(StageExecutorTest, OneWorkerIsBitIdenticalToStage) {
  for (const ModelSpec& model : {Mlp(), Vit()}) {
    Pipeline stage =
        Make(model, {{0, 2}, {2, 5}}, {0, 0}, OptimizerKind::kAdamW, DeviceKind::kCpu, 2);
    Pipeline group =
        Make(model, {{0, 2}, {2, 5}}, {1, 1}, OptimizerKind::kAdamW, DeviceKind::kCpu, 2);
    ExpectBitIdentical(stage, group, {6, 3});
  }
}

TEST(StageExecutorTest, SameWorkersTwiceIsBitIdentical) {
  for (const ModelSpec& model : {Mlp(), Vit()}) {
    Pipeline a = Make(model, {{0, 5}}, {3}, OptimizerKind::kAdamW, DeviceKind::kCpu, 1);
    Pipeline b = Make(model, {{0, 5}}, {3}, OptimizerKind::kAdamW, DeviceKind::kCpu, 1);
    ExpectBitIdentical(a, b, {6, 5, 2});
  }
}

TEST(StageExecutorTest, WorkersStayIdenticalAndSettersReachAll) {
  auto group = StageExecutor::Create(Mlp(), {0, 5}, TestOptimizer(OptimizerKind::kAdamW), kMaxBatch,
                                     {}, {.count = 2});
  ASSERT_TRUE(group.ok()) << group.status();
  StageExecutor& g = **group;
  EXPECT_EQ(g.workers(), 2);
  EXPECT_EQ(g.device_names(), "cpu (1 threads), cpu (1 threads)");
  // New parameters everywhere: a step on two identical rows gives identical halves, and the
  // forward of one row per worker equals the forward of either row alone.
  std::vector<float> params(g.param_count());
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.1f * (CounterUniform(7, i) - 0.5f);
  ASSERT_TRUE(g.SetParams(params).ok());
  EXPECT_EQ(*g.Params(), params);
  std::vector<float> x(2 * g.input_features()), y(2 * g.output_features());
  for (int64_t i = 0; i < g.input_features(); ++i) x[i] = x[i + g.input_features()] = 0.01f * i;
  ASSERT_TRUE(g.Forward(0, 0, 2, x.data(), y.data(), {.training = false}).ok());
  g.Discard(0);
  EXPECT_TRUE(
      std::equal(y.begin(), y.begin() + g.output_features(), y.begin() + g.output_features()));
  auto state = g.OptimizerState();
  ASSERT_TRUE(state.ok());
  std::vector<float> new_state(state->size(), 0.25f);
  ASSERT_TRUE(g.SetOptimizerState(new_state).ok());
  EXPECT_EQ(*g.OptimizerState(), new_state);
}

TEST(StageExecutorTest, ContractErrors) {
  EXPECT_FALSE(StageExecutor::Create(Mlp(), {0, 5}, OptimizerSpec{}, 6, {}, {.count = 0}).ok());
  auto group = StageExecutor::Create(Mlp(), {0, 2}, OptimizerSpec{}, 6, {}, {.count = 2});
  ASSERT_TRUE(group.ok()) << group.status();
  StageExecutor& g = **group;
  std::vector<float> x(7 * g.input_features());
  EXPECT_EQ(g.Forward(0, 0, 7, x.data(), nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.Forward(0, 0, 0, x.data(), nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.Backward(3, x.data(), nullptr, true).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(g.Forward(0, 0, 3, x.data(), nullptr).ok());
  EXPECT_EQ(g.Forward(0, 0, 3, x.data(), nullptr).code(), absl::StatusCode::kFailedPrecondition);
  int32_t labels[3] = {0, 1, 2};
  EXPECT_EQ(g.Loss(0, labels, 1.0f).status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<float> dy(3 * g.output_features(), 0.5f);
  EXPECT_TRUE(g.Backward(0, dy.data(), nullptr, true).ok());
  if (!BuiltWithCuda()) {
    EXPECT_EQ(StageExecutor::Create(Mlp(), {0, 5}, OptimizerSpec{}, 6, {},
                                    {.device = DeviceKind::kCuda, .count = 2})
                  .status()
                  .code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace strait::site
