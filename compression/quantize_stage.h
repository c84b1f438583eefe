// Layout of the int8/int4 payload, shared with the CUDA kernels: nblocks fp32 scales (one per
// block of `block` values, absmax / qmax), then the codes: int8 one per byte, int4 two per byte
// (even element in the low nibble). Code -qmax-1 (-128 / -8) marks a NaN or Inf input, which
// decodes as NaN. Value = code * scale.
#pragma once

#include <cstdint>

namespace strait::compression {

inline constexpr uint64_t BlockCount(uint64_t n, uint64_t block) { return (n + block - 1) / block; }

// Payload bytes for n values at `bits` (8 or 4) per code.
inline constexpr uint64_t QuantizedSize(int bits, uint64_t n, uint64_t block) {
  return 4 * BlockCount(n, block) + (bits == 8 ? n : (n + 1) / 2);
}

}  // namespace strait::compression
