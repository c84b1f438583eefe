// GradientMoments: the second moment of the gradients that come back over a link, kept for the
// sender of the link's forward (klt:STEP:fisher): the directions of a boundary's rows that the
// loss is sensitive to are those its gradient is large in, so that sender puts its quantizer's
// noise where they are small. Thread-safe: the backward's receiver adds, the forward's encoder
// takes, each on its own thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "absl/types/span.h"

namespace strait::compression {

class GradientMoments {
 public:
  // Adds the rows of `values` (rows of `width` values; a remainder is ignored). Rows of another
  // width than the last Add's start over.
  void Add(absl::Span<const float> values, size_t width);
  // The mean of g g^T over the rows added since the last Take (width x width, row-major, both
  // triangles), or empty when none of this width were; then forgets them.
  std::vector<double> Take(size_t width);

 private:
  std::mutex mutex_;
  size_t width_ = 0;
  uint64_t rows_ = 0;
  std::vector<double> sum_;     // width x width, upper triangle (row-major)
  std::vector<float> product_;  // One Add's g^T g.
};

}  // namespace strait::compression
