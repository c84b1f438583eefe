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
  return StepAt(0, averaged_delta, start);
}

absl::Status OuterOptimizer::StepAt(size_t offset, std::span<const float> averaged_delta,
                                    std::span<float> start) {
  if (averaged_delta.size() != start.size() || offset > velocity_.size() ||
      start.size() > velocity_.size() - offset) {
    return absl::InvalidArgumentError(absl::StrCat("outer step over parameters [", offset, ", ",
                                                   offset + start.size(), ") of ", velocity_.size(),
                                                   " given ", averaged_delta.size(), " deltas"));
  }
  for (size_t j = 0; j < start.size(); ++j) {
    float& velocity = velocity_[offset + j];
    const float v = momentum_ * velocity + averaged_delta[j];
    velocity = v;
    const float update = averaged_delta[j] + momentum_ * v;
    start[j] -= lr_ * update;
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
