// Test harness shared by the StageExecutor tests: small models, a pipeline of stages that are
// plain Stages driven by hand (with a WeightHistory and an Optimizer) or StageExecutors, driven
// alike, one training step over it, and a tensor comparison.
#pragma once

#include <memory>
#include <vector>

#include "core/job_spec.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site::harness {

// 5-layer models with dropout 0.2: an MLP (20 -> 4 classes) and a ViT (8x8x1 images).
ModelSpec Mlp();
ModelSpec Vit();
OptimizerSpec TestOptimizer(OptimizerKind kind);  // lr 0.02, weight decay 0.01

inline constexpr int kMaxBatch = 6;  // every unit's microbatch size

// A stage of the pipeline under test: a plain Stage or a StageExecutor, driven alike.
class Unit {
 public:
  virtual ~Unit() = default;
  virtual int64_t in() const = 0;
  virtual int64_t out() const = 0;
  virtual absl::Status Forward(int64_t step, int m, int n, const float* x, float* y) = 0;
  virtual absl::StatusOr<LossResult> Loss(int m, const int32_t* labels, float scale) = 0;
  virtual absl::Status Backward(int m, const float* dy, float* dx, bool last) = 0;
  virtual void ZeroGrad() = 0;
  virtual absl::StatusOr<double> GradSumSquares(double downstream) = 0;
  virtual absl::Status OptimizerStep(int64_t step, float scale) = 0;
  virtual std::vector<float> Params() = 0;
};

using Pipeline = std::vector<std::unique_ptr<Unit>>;

struct StepOutcome {
  std::vector<float> outputs;  // the last unit's logits, every microbatch in order
  std::vector<float> params;   // every unit's, after the optimizer step
  double loss = 0;
  int64_t correct = 0;
  double grad_sum_squares = 0;
};

// One step in GPipe order over microbatches of sizes[m] rows, chained through host buffers:
// inputs and labels are functions of (step, microbatch, index).
StepOutcome RunStep(Pipeline& units, int64_t step, const std::vector<int>& sizes);

// Unit k holds layers ranges[k]: a Stage on a CPU backend of `threads` threads when workers[k] is
// 0, otherwise a StageExecutor of workers[k] workers of kind `device`, `threads` threads each.
Pipeline Make(const ModelSpec& model, const std::vector<LayerRange>& ranges,
              const std::vector<int>& workers, OptimizerKind opt, DeviceKind device, int threads);

// max |a - b| / max |b|: the difference relative to the tensor's scale (elements near zero would
// make an element-wise ratio measure nothing but rounding).
double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace strait::site::harness
