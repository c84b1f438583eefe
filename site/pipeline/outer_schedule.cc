#include "site/pipeline/outer_schedule.h"

#include <algorithm>

#include "site/exchange/masked_sum.h"

namespace strait::site {

ValueRange FragmentRange(size_t n, int fragments, int p) {
  const size_t blocks = (n + kSumBlock - 1) / kSumBlock;
  const size_t first = blocks * p / fragments, last = blocks * (p + 1) / fragments;
  return {std::min(n, first * kSumBlock), std::min(n, last * kSumBlock)};
}

std::optional<int> FragmentDue(int64_t steps_done, int every, int fragments) {
  if (steps_done <= 0) return std::nullopt;
  for (int p = 0; p < fragments; ++p) {
    const int64_t offset = int64_t{p} * every / fragments;
    if ((steps_done + offset) % every == 0) return p;
  }
  return std::nullopt;
}

}  // namespace strait::site
