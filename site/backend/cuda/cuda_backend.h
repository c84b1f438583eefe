// The CUDA backend: cuBLAS for matrix products, kernels for the rest, one stream per backend, plain
// device allocations (no managed memory). This header is plain C++ (no CUDA headers), so the
// factory can include it.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/backend/backend.h"

namespace strait::site {

// A backend on CUDA device `device`. FailedPrecondition when there is no such device (or no
// driver); the message says what CUDA reported. With Precision::kBf16 the matrix products round
// their inputs to bf16 (as the CPU backend's emulation does) and run on tensor cores with fp32
// accumulation. The backend is used by one thread at a time.
// AttentionKernel::kDefault is kBatched: it measured faster than the fused kernels on an H200
// (docs/benchmarks.md "Fused attention"; scripts/gpu-check measures both).
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(
    int device, Precision precision = Precision::kFp32,
    AttentionKernel attention = AttentionKernel::kDefault, bool timed_gemm = false);

// The cudaStream_t on which `backend` queues its ops, or nullptr when it is not a CUDA backend.
// For the local all-reduce (site/collective), which orders NCCL calls after the backward's work
// on that stream; the stream stays owned by the backend.
void* CudaStreamOf(Backend& backend);

}  // namespace strait::site
