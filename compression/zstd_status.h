// The check macro for zstd calls (DESIGN.md §9): a zstd error code becomes an absl::Status that
// names the call site.
#pragma once

#include <zstd.h>
#include <zstd_errors.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::compression {

// Corrupt or truncated input is InvalidArgument, running out of memory ResourceExhausted, anything
// else Internal.
inline absl::Status ZstdError(size_t code, const char* file, int line) {
  std::string message = absl::StrCat("zstd: ", ZSTD_getErrorName(code), " (", file, ":", line, ")");
  switch (ZSTD_getErrorCode(code)) {
    case ZSTD_error_memory_allocation:
      return absl::ResourceExhaustedError(message);
    case ZSTD_error_GENERIC:
    case ZSTD_error_parameter_unsupported:
    case ZSTD_error_parameter_outOfBound:
    case ZSTD_error_init_missing:
    case ZSTD_error_stage_wrong:
      return absl::InternalError(message);
    default:
      return absl::InvalidArgumentError(message);
  }
}

}  // namespace strait::compression

// Evaluates a zstd call returning size_t; returns its error as a Status, else assigns to `lhs`.
#define STRAIT_ZSTD_ASSIGN_OR_RETURN(lhs, expr)                                           \
  size_t STRAIT_STATUS_CONCAT(strait_zstd_, __LINE__) = (expr);                           \
  if (ZSTD_isError(STRAIT_STATUS_CONCAT(strait_zstd_, __LINE__))) {                       \
    return ::strait::compression::ZstdError(STRAIT_STATUS_CONCAT(strait_zstd_, __LINE__), \
                                            __FILE__, __LINE__);                          \
  }                                                                                       \
  lhs = STRAIT_STATUS_CONCAT(strait_zstd_, __LINE__)
