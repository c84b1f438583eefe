// The CPU backend: OpenBLAS sgemm for matrix products (split over a fixed pool of threads, each
// part a single-threaded sgemm), vectorisable loops split over the same pool for the rest.
// Element-wise and row-wise ops give the same bits for any thread count; matrix products are
// deterministic for a given thread count. Sets OpenBLAS to one thread (process-wide).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/backend/backend.h"

namespace strait::site {

// INVALID_ARGUMENT naming `threads` when it is below 1. With Precision::kBf16 activations and
// product operands are stored as bf16 and every op widens, computes in f32 and rounds once on the
// store, and the matrix products round f32 inputs to bf16 first: an emulation of the CUDA backend's
// bf16 path, its test reference. The returned backend is not thread-safe (one user thread at a
// time). AttentionKernel::kDefault is kBatched on the CPU (OpenBLAS's products are faster there).
absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(
    int threads, Precision precision = Precision::kFp32,
    AttentionKernel attention = AttentionKernel::kDefault);

}  // namespace strait::site
