// The basis of a proj stage (chain_spec.h): d x K with orthonormal columns, derived from a seed
// alone, so that both ends of a link hold the same U without sending it. Its bits are the same on
// every platform and compiler: the normals come from SplitMix64 through Box-Muller with this file's
// own log, sine and cosine (IEEE +, -, *, / and sqrt only, which round exactly), two passes of
// modified Gram-Schmidt run in double, and the result is rounded to float once. The .cc is compiled
// with -ffp-contract=off (no fused multiply-add on any target).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace strait::compression {

// Largest d * K a basis may have (16 MiB of fp32 each for U and U^T; building it costs about
// 2 d K^2 multiply-adds). A frame's header names d and K, so this bounds what one costs a decoder.
inline constexpr uint64_t kMaxBasisElements = uint64_t{1} << 22;

struct Basis {
  uint64_t seed = 0;
  uint64_t rows = 0;       // d
  uint64_t cols = 0;       // K
  std::vector<float> u;    // [d][K] row-major: U
  std::vector<float> u_t;  // [K][d] row-major: U^T, the same values
};

// The basis for (seed, d, K). InvalidArgument unless 1 <= K <= d and d * K <= kMaxBasisElements.
// Built on first use (blocking the caller) and kept in a small process-wide cache of the most
// recent ones; callers share the result. Thread-safe.
absl::StatusOr<std::shared_ptr<const Basis>> SeededBasis(uint64_t seed, uint64_t d, uint64_t k);

// The standard normal numbers SeededBasis starts from: `count` of them for `seed`, in the order it
// fills U's columns (column j of U takes normals [j * d, (j + 1) * d)). For tests.
std::vector<double> SeededNormals(uint64_t seed, uint64_t count);

}  // namespace strait::compression
