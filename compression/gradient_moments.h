// GradientMoments: the second moment of the gradients that come back over a link, kept for the
// sender of the link's forward (klt:STEP:fisher): the directions of a boundary's rows that the
// loss is sensitive to are those its gradient is large in, so that sender puts its quantizer's
// noise where they are small. Sums are kept by optimizer step, so that what a fit takes does not
// depend on how far the backward's frames have come: the forward of step s takes the gradients of
// the steps before s - 1, which every schedule (2bw's included) has received by then. Thread-safe:
// the backward's receiver adds, the forward's encoder takes, each on its own thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "absl/types/span.h"

namespace strait::compression {

class GradientMoments {
 public:
  // Adds the rows of `values` (rows of `width` values; a remainder is ignored), gradients of
  // optimizer step `step`. Rows of another width than the last Add's start over.
  void Add(absl::Span<const float> values, size_t width, uint64_t step);
  // The mean of g g^T over the rows of the steps before `before` added since the last Take (width
  // x width, row-major, both triangles), or empty when there are none of this width; then forgets
  // them, and keeps the later steps' for the next Take.
  std::vector<double> Take(size_t width, uint64_t before);

 private:
  struct Sum {
    uint64_t rows = 0;
    std::vector<double> upper;  // width x width, upper triangle (row-major)
  };
  void Fold(Sum& from, Sum& into) const;

  std::mutex mutex_;
  size_t width_ = 0;
  // Steps at least two before the newest added are settled: no Take that is still to come can
  // leave them (its `before` is at least the newest step - 1). The newer ones are kept by step.
  Sum settled_;
  std::map<uint64_t, Sum> recent_;
  std::vector<float> product_;  // One Add's g^T g.
};

}  // namespace strait::compression
