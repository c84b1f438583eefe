#include "site/nn/outer_optimizer.h"

#include "absl/strings/str_cat.h"

namespace strait::site {

OuterOptimizer::OuterOptimizer(float lr, float momentum, int64_t n)
    : lr_(lr), momentum_(momentum), velocity_(static_cast<size_t>(n), 0.0f) {}

absl::Status OuterOptimizer::Step(std::span<const float> averaged_delta, std::span<float> start) {
  if (averaged_delta.size() != velocity_.size() || start.size() != velocity_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("outer step over ", velocity_.size(),
                                                   " parameters given ", averaged_delta.size(),
                                                   " deltas and ", start.size(), " parameters"));
  }
  for (size_t i = 0; i < velocity_.size(); ++i) {
    const float v = momentum_ * velocity_[i] + averaged_delta[i];
    velocity_[i] = v;
    const float update = averaged_delta[i] + momentum_ * v;
    start[i] -= lr_ * update;
  }
  return absl::OkStatus();
}

absl::Status OuterOptimizer::SetMomentum(std::span<const float> velocity) {
  if (velocity.size() != velocity_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "an outer momentum of ", velocity.size(), " floats for ", velocity_.size(), " parameters"));
  }
  velocity_.assign(velocity.begin(), velocity.end());
  return absl::OkStatus();
}

}  // namespace strait::site
