// The check macros for CUDA runtime, cuBLAS, cuDNN and NCCL calls (DESIGN.md §9: one per external
// library), for every folder that may call them: compression/cuda, site/backend/cuda and
// site/collective. Each evaluates `expr` once and yields an absl::Status: OK when the call
// succeeded, else Internal with "<file>:<line>: <expr>: <error name>: <description>". They do not
// return from the caller; combine them with the Status helpers:
//   STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaMallocAsync(&p, bytes, stream)));
//   absl::Status s = STRAIT_CUBLAS_CHECK(cublasCreate(&handle));
//   replica.status.Update(STRAIT_NCCL_CHECK(ncclGroupEnd()));
// STRAIT_CUDA_CHECK needs only this header. STRAIT_CUBLAS_CHECK, STRAIT_CUDNN_CHECK and
// STRAIT_NCCL_CHECK name cuBLAS's, cuDNN's and NCCL's own error-string functions, so the file using
// them includes <cublas_v2.h>, <cudnn.h> or <nccl.h> (it does anyway, to make the call): code that
// uses CUDA alone needs none of those libraries.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strait::compression {

// The status of a library call that returned `code`; `describe(code)` (called only on failure)
// names the error. Use the macros below rather than this.
template <typename Code, typename Describe>
absl::Status LibraryCallStatus(Code code, Code success, Describe describe, const char* expr,
                               const char* file, int line) {
  if (code == success) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, ": ", describe(code)));
}

// "cudaErrorMemoryAllocation: out of memory".
inline std::string DescribeCudaError(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

}  // namespace strait::compression

// A CUDA runtime call, or anything returning cudaError_t (kernel launchers, cub).
#define STRAIT_CUDA_CHECK(expr)                          \
  ::strait::compression::LibraryCallStatus<cudaError_t>( \
      (expr), cudaSuccess, ::strait::compression::DescribeCudaError, #expr, __FILE__, __LINE__)

// A cuBLAS call (include <cublas_v2.h> first).
#define STRAIT_CUBLAS_CHECK(expr)                                                      \
  ::strait::compression::LibraryCallStatus<cublasStatus_t>(                            \
      (expr), CUBLAS_STATUS_SUCCESS,                                                   \
      [](cublasStatus_t e) {                                                           \
        return ::absl::StrCat(cublasGetStatusName(e), ": ", cublasGetStatusString(e)); \
      },                                                                               \
      #expr, __FILE__, __LINE__)

// A cuDNN call (include <cudnn.h> first): the status's name and number, then what
// cudnnGetLastErrorString says about the failure (when it says anything).
#define STRAIT_CUDNN_CHECK(expr)                                                              \
  ::strait::compression::LibraryCallStatus<cudnnStatus_t>(                                    \
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
  ::strait::compression::LibraryCallStatus<ncclResult_t>(                                       \
      (expr), ncclSuccess,                                                                      \
      [](ncclResult_t e) {                                                                      \
        return ::absl::StrCat("ncclResult ", static_cast<int>(e), ": ", ncclGetErrorString(e)); \
      },                                                                                        \
      #expr, __FILE__, __LINE__)
