// DiLoCo's outer step (Douillard et al., "DiLoCo: Distributed Low-Communication Training of
// Language Models", 2023; issue 31, `training.sync: outer`). Every H inner steps the replicas of a
// stage average their pseudo-gradients delta = start - now (start: the parameters the H steps began
// from), and every replica applies the same outer update to `start` with Nesterov momentum, as
// PyTorch's SGD(nesterov=True, dampening=0) does:
//   v = momentum * v + delta;   start -= lr * (delta + momentum * v)
// The result is the next round's start on every replica. lr 1 and momentum 0 give the average of
// the replicas' parameters (FedAvg). Host floats, element by element in a fixed order: every
// replica computes the same bits.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"

namespace strait::site {

class OuterOptimizer {
 public:
  // Over `n` parameters; lr > 0, 0 <= momentum < 1.
  OuterOptimizer(float lr, float momentum, int64_t n);

  // `start` (n floats) becomes the next round's start, given the replicas' averaged delta.
  // InvalidArgument when a span's length is not n.
  absl::Status Step(std::span<const float> averaged_delta, std::span<float> start);
  // The same for the values [offset, offset + size) only (a fragment's round): their momentum
  // moves, the others' stays. InvalidArgument when the range does not fit.
  absl::Status StepAt(size_t offset, std::span<const float> averaged_delta, std::span<float> start);

  // The momentum buffer, for checkpoints; SetMomentum restores one (InvalidArgument for another
  // length).
  const std::vector<float>& momentum_buffer() const { return velocity_; }
  absl::Status SetMomentum(std::span<const float> velocity);

 private:
  float lr_, momentum_;
  std::vector<float> velocity_;
};

}  // namespace strait::site
