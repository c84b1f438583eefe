#include "site/nn/optimizer.h"

#include <cmath>
#include <utility>

namespace strait::site {

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerSpec& spec, int64_t n,
                                                             Backend* backend) {
  const int64_t floats = spec.kind == OptimizerKind::kSgd ? n : 2 * n;
  absl::StatusOr<DeviceBuffer> state = DeviceBuffer::Create(backend, sizeof(float) * floats);
  if (!state.ok()) return state.status();
  return std::unique_ptr<Optimizer>(new Optimizer(spec, n, backend, *std::move(state)));
}

Optimizer::Optimizer(const OptimizerSpec& spec, int64_t n, Backend* backend, DeviceBuffer state)
    : spec_(spec),
      n_(n),
      state_floats_(spec.kind == OptimizerKind::kSgd ? n : 2 * n),
      backend_(backend),
      state_(std::move(state)) {}

void Optimizer::Step(int64_t step, float grad_scale, float* params, const float* grads,
                     TypedPtr param_copy) {
  const double warmup =
      spec_.warmup_steps > 0 ? std::min(1.0, static_cast<double>(step) / spec_.warmup_steps) : 1.0;
  double decay = 1.0;
  if (spec_.decay == LrDecay::kCosine && spec_.decay_steps > 0) {
    const double progress =
        std::min(1.0, static_cast<double>(step - 1) / static_cast<double>(spec_.decay_steps));
    decay = 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  }
  const float lr = static_cast<float>(spec_.lr * warmup * decay),
              wd = static_cast<float>(spec_.weight_decay);
  if (spec_.kind == OptimizerKind::kSgd) {
    backend_->SgdUpdate(n_, lr, static_cast<float>(spec_.momentum), wd, grad_scale, params, grads,
                        state_.f32(), param_copy);
    return;
  }
  const double t = static_cast<double>(step);
  const float bias1 = static_cast<float>(1.0 - std::pow(spec_.beta1, t));
  const float bias2 = static_cast<float>(1.0 - std::pow(spec_.beta2, t));
  backend_->AdamWUpdate(n_, lr, static_cast<float>(spec_.beta1), static_cast<float>(spec_.beta2),
                        static_cast<float>(spec_.eps), wd, bias1, bias2, grad_scale, params, grads,
                        state_.f32(), state_.f32() + n_, param_copy);
}

float GlobalNormClipScale(double total_sum_squares, double max_norm) {
  const double norm = std::sqrt(total_sum_squares);
  return max_norm > 0.0 && norm > max_norm ? static_cast<float>(max_norm / norm) : 1.0f;
}

}  // namespace strait::site
