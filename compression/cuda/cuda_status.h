// The check macro for CUDA runtime calls (DESIGN.md §9).
#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

// Returns an Internal status naming the call site when a CUDA runtime call fails.
#define STRAIT_CUDA_RETURN_IF_ERROR(expr)                                                         \
  do {                                                                                            \
    cudaError_t strait_cuda_error_ = (expr);                                                      \
    if (strait_cuda_error_ != cudaSuccess) {                                                      \
      return ::absl::InternalError(::absl::StrCat(                                                \
          "CUDA: ", cudaGetErrorString(strait_cuda_error_), " (", __FILE__, ":", __LINE__, ")")); \
    }                                                                                             \
  } while (0)
