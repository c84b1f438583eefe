// The check macros for the GPU libraries' calls (DESIGN.md §9: one per external library): CUDA
// runtime, cuBLAS(Lt), cuDNN and NCCL, for every folder that may call them (compression/cuda,
// site/backend/cuda, site/collective). Each evaluates `expr` once and yields an absl::Status: OK
// when the call succeeded, else Internal with "<file>:<line>: <expr>: <error name>: <description>".
// They do not return from the caller; combine them with the Status helpers:
//   STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaMallocAsync(&p, bytes, stream)));
//   absl::Status s = STRAIT_CUBLAS_CHECK(cublasLtCreate(&handle));
// Header-only, and it includes no CUDA header: each macro names its library's own error functions,
// so the file that uses one includes that library's header (it does anyway, to make the call).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strait {

// The status of a library call that returned `code`; `describe(code)` (called only on failure)
// names the error. Use the macros below rather than this.
template <typename Code, typename Describe>
absl::Status LibraryCallStatus(Code code, Code success, Describe describe, const char* expr,
                               const char* file, int line) {
  if (code == success) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, ": ", describe(code)));
}

}  // namespace strait

// A CUDA runtime call, or anything returning cudaError_t (kernel launchers, cub): "cudaErrorMemory
// Allocation: out of memory". Include <cuda_runtime_api.h> first.
#define STRAIT_CUDA_CHECK(expr)                                                               \
  ::strait::LibraryCallStatus<cudaError_t>((expr), cudaSuccess,                               \
                                           [](cudaError_t e) {                                \
                                             return ::absl::StrCat(cudaGetErrorName(e), ": ", \
                                                                   cudaGetErrorString(e));    \
                                           },                                                 \
                                           #expr, __FILE__, __LINE__)

// A cuBLAS or cuBLASLt call (include <cublas_v2.h> or <cublasLt.h> first).
#define STRAIT_CUBLAS_CHECK(expr)                                                      \
  ::strait::LibraryCallStatus<cublasStatus_t>(                                         \
      (expr), CUBLAS_STATUS_SUCCESS,                                                   \
      [](cublasStatus_t e) {                                                           \
        return ::absl::StrCat(cublasGetStatusName(e), ": ", cublasGetStatusString(e)); \
      },                                                                               \
      #expr, __FILE__, __LINE__)

// A cuDNN call (include <cudnn.h> first): the status's name and number, then what
// cudnnGetLastErrorString says about the failure (when it says anything).
#define STRAIT_CUDNN_CHECK(expr)                                                              \
  ::strait::LibraryCallStatus<cudnnStatus_t>(                                                 \
      (expr), CUDNN_STATUS_SUCCESS,                                                           \
      [](cudnnStatus_t e) {                                                                   \
        char strait_cudnn_last_[512] = {};                                                    \
        cudnnGetLastErrorString(strait_cudnn_last_, sizeof(strait_cudnn_last_));              \
        return ::absl::StrCat(cudnnGetErrorString(e), " (", static_cast<int>(e), ")",         \
                              strait_cudnn_last_[0] != '\0' ? ": " : "", strait_cudnn_last_); \
      },                                                                                      \
      #expr, __FILE__, __LINE__)

// An NCCL call (include <nccl.h> first). NCCL has no name function: the name is the number.
#define STRAIT_NCCL_CHECK(expr)                                                                 \
  ::strait::LibraryCallStatus<ncclResult_t>(                                                    \
      (expr), ncclSuccess,                                                                      \
      [](ncclResult_t e) {                                                                      \
        return ::absl::StrCat("ncclResult ", static_cast<int>(e), ": ", ncclGetErrorString(e)); \
      },                                                                                        \
      #expr, __FILE__, __LINE__)
