// Times alternative implementations of one operation on a stream and names the fastest: cuBLASLt's
// candidate algorithms for a product shape (lt_matmul.h, AlgorithmChoice::kTimed). Host code;
// synchronises the stream. Not thread-safe per stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace strait::site {

struct CandidateTimes {
  int fastest = -1;   // index of the fastest candidate that ran; -1 when none did
  std::string times;  // ms per run of each candidate, "failed" for one that did not run
};

// Runs each of `candidates` once (a warm-up), then `runs` times between two events; `launch(i)`
// queues candidate i on `stream` and says whether it was queued. The `preserved_bytes` at
// `preserved` (an output the operation also reads, like an accumulating product's C) are saved
// first and restored after, so that the trials leave them as they found them. Errors: a CUDA call
// of the timing itself failed.
absl::StatusOr<CandidateTimes> TimeCandidates(cudaStream_t stream, int candidates,
                                              const std::function<bool(int)>& launch,
                                              void* preserved, size_t preserved_bytes,
                                              int runs = 3);

}  // namespace strait::site
