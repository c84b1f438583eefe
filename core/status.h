// Status helpers used across Strait (DESIGN.md §9: leveldb-style Status returns, absl types).
//
// Header-only and depending on abseil alone, so that the leaf libraries (crypto, compression) may
// use it too without depending on the rest of core.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Returns from the enclosing function when `expr` (an absl::Status) is not OK.
#define STRAIT_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status strait_status_ = (expr);          \
    if (!strait_status_.ok()) return strait_status_; \
  } while (0)

#define STRAIT_STATUS_CONCAT_INNER(a, b) a##b
#define STRAIT_STATUS_CONCAT(a, b) STRAIT_STATUS_CONCAT_INNER(a, b)

// Evaluates `rexpr` (an absl::StatusOr<T>); returns its status when not OK, otherwise moves the
// value into `lhs`, which may be a declaration: STRAIT_ASSIGN_OR_RETURN(auto spec, LoadJobSpec(p));
#define STRAIT_ASSIGN_OR_RETURN(lhs, rexpr) \
  STRAIT_ASSIGN_OR_RETURN_IMPL(STRAIT_STATUS_CONCAT(strait_statusor_, __LINE__), lhs, rexpr)

#define STRAIT_ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                 \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
