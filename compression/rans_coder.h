// Entropy coding of integer symbols with static tables (byte-wise rANS): klt's output. Symbols lie
// in rows of `width` columns, and columns of about the same spread share a table of token
// frequencies written in the output: a column's group is the half-octave of its mean magnitude, so
// that columns of very different spread (a transform's components) each cost about their own
// entropy for a byte a column and a table a group.
//
// A symbol q becomes u = zigzag(q), then a token: u itself below 16, else 16 + 2 * (position of
// u's leading one - 4) + the bit after it; the bits below those travel raw. Layout (little-endian):
//   width bytes: each column's group (< kGroups)
//   for each group used, in increasing order: u8 first token, u8 token count C, C frequencies
//     (LEB128, summing to 4096)
//   u32 R, R bytes of raw bits (LSB first, in symbol order)
//   the rANS stream: the final state (u32), then the renormalisation bytes
// No symbols: no bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "compression/byte_buffer.h"

namespace strait::compression {

inline constexpr uint32_t kGroups = 48;
inline constexpr int32_t kMaxCodedSymbol = (1 << 30) - 1;  // |q| at most this

// Bytes the coding of `count` symbols in rows of `width` can take, at most (for size checks).
uint64_t MaxCodedSize(uint64_t count, uint64_t width);

// Reuses its scratch across calls: not thread-safe, one per stage.
class RansCoder {
 public:
  // Appends the coding of `symbols` (each in [-kMaxCodedSymbol, kMaxCodedSymbol], a multiple of
  // `width` >= 1 of them) to *out at offset `at` (resizing it).
  void Encode(absl::Span<const int32_t> symbols, size_t width, ByteBuffer* out, size_t at);
  // Decodes exactly out.size() symbols (rows of `width`) from all of `in`. Malformed input is
  // InvalidArgument naming what is wrong; never reads or writes out of bounds.
  absl::Status Decode(absl::Span<const uint8_t> in, size_t width, absl::Span<int32_t> out);

 private:
  std::vector<uint8_t> tokens_;      // One per symbol (encode).
  std::vector<uint8_t> group_;       // Per column.
  std::vector<uint32_t> table_;      // Per column: its group's table (dense index).
  std::vector<uint64_t> magnitude_;  // Per column, summed (encode).
  std::vector<uint32_t> counts_;     // Per table and token.
  std::vector<uint16_t> freq_, cumulative_;
  std::vector<uint8_t> slot_token_;  // Per table, 4096 slots (decode).
  std::vector<uint8_t> renormalised_;
};

}  // namespace strait::compression
