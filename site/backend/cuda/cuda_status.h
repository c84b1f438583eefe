// CUDA runtime errors -> absl::Status with file:line (DESIGN.md §9: one check macro per library),
// shared by the CUDA backend and the NCCL all-reducer (site/collective).
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace strait {

inline absl::Status CudaStatus(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", expr, ": ", cudaGetErrorName(e),
                                          " (", cudaGetErrorString(e), ")"));
}

}  // namespace strait

#define STRAIT_CUDA_STATUS(expr) ::strait::CudaStatus((expr), #expr, __FILE__, __LINE__)
