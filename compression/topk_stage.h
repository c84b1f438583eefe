// Top-k selection rules shared by the topk stage and the CUDA selection kernel.
#pragma once

#include <cstdint>

#include "compression/float_bits.h"

namespace strait::compression {

// Number of values topk keeps out of n: round(fraction * n), at least 1 when n > 0.
uint64_t TopKCount(uint64_t n, double fraction);

// Ordering key of a value for top-k: |value| as integer bits, so NaN > Inf > finite magnitudes.
STRAIT_HD uint32_t MagnitudeKey(uint32_t float_bits) { return float_bits & 0x7fffffffu; }

}  // namespace strait::compression
