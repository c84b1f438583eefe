// Which values an outer round carries and when (training.outer; Streaming DiLoCo's fragments):
// the stage's n parameters in `fragments` contiguous runs of whole kSumBlock blocks, fragment p's
// rounds starting after the updates that complete steps s with (s + offset_p) % every == 0,
// offset_p = floor(p * every / fragments). The offsets are distinct (fragments <= every), so at
// most one round starts after a step, and each value is in a round once every `every` steps. Pure
// functions of the job spec: every replica computes the same, and nothing depends on the values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace strait::site {

struct ValueRange {
  size_t begin = 0, end = 0;  // [begin, end) of the stage's parameters.
  size_t size() const { return end - begin; }
};

// Fragment p of `fragments` over n values (block-aligned; a fragment may be empty when there are
// fewer blocks than fragments).
ValueRange FragmentRange(size_t n, int fragments, int p);

// The fragment whose round starts after the update that completes `steps_done` steps, if any.
std::optional<int> FragmentDue(int64_t steps_done, int every, int fragments);

}  // namespace strait::site
