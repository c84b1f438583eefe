// Optimizers over one stage's parameter arena: SGD with momentum and AdamW.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/backend/backend.h"

namespace strait::site {

class Optimizer {
 public:
  // State for `n` parameters on `backend` (zeroed). The backend must outlive the optimizer.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerSpec& spec, int64_t n,
                                                           Backend* backend);

  // One update of params [n] from grads [n] scaled by grad_scale (global-norm clipping).
  // `step` counts updates from 1 (AdamW's bias correction). When param_copy is set the updated
  // params are also stored there, in its type, by the same pass. Queued on the backend.
  void Step(int64_t step, float grad_scale, float* params, const float* grads,
            TypedPtr param_copy = TypedPtr());

  // The optimizer state on the device: velocity [n] (SGD) or m [n] then v [n] (AdamW).
  int64_t state_floats() const { return state_floats_; }
  float* state() const { return state_.f32(); }

 private:
  Optimizer(const OptimizerSpec& spec, int64_t n, Backend* backend, DeviceBuffer state);

  OptimizerSpec spec_;
  int64_t n_;
  int64_t state_floats_;
  Backend* backend_;
  DeviceBuffer state_;
};

// Gradient scale for clipping by global norm: max_norm / norm when the norm (sqrt of the sum over
// all stages of Stage::GradSumSquares) exceeds max_norm > 0, else 1. Every stage must use the
// same total, so every stage computes the same scale.
float GlobalNormClipScale(double total_sum_squares, double max_norm);

}  // namespace strait::site
