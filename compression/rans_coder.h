// Entropy coding of integer symbols with static tables (byte-wise rANS): klt's output. Symbols lie
// in rows of `width` columns, and columns of about the same spread share a table of token
// frequencies written in the output: a column's group is the half-octave of its mean magnitude, so
// that columns of very different spread (a transform's components) each cost about their own
// entropy for a byte a column and a table a group.
//
// A symbol q becomes u = zigzag(q), then a token: u itself below 16, else 16 + 2 * (position of
// u's leading one - 4) + the bit after it; the bits below those travel raw. Layout (little-endian):
//   [the tables: width bytes: each column's group (< kGroups); for each group used, in increasing
//     order: u8 first token, u8 token count C, C frequencies (LEB128, summing to 4096)]
//   u32 R, R bytes of raw bits (LSB first, in symbol order)
//   the rANS stream: the final state (u32), then the renormalisation bytes
// No symbols: no bytes. A stream may leave the tables out and use the ones of the stream before it
// (the coder's caller says which, and keeps the streams in order): consecutive frames of a link
// have about the same statistics, and the tables are 2-4% of a frame.
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

// Keeps the tables of its last stream and reuses its scratch across calls: not thread-safe, one per
// stage and direction.
class RansCoder {
 public:
  // Appends the coding of `symbols` (each in [-kMaxCodedSymbol, kMaxCodedSymbol], a multiple of
  // `width` >= 1 of them) to *out at offset `at` (resizing it). With `may_reuse`, codes with the
  // last stream's tables, leaving them out, when they have the same width, cover every token and
  // cost fewer bytes than new ones; returns whether it did.
  bool Encode(absl::Span<const int32_t> symbols, size_t width, ByteBuffer* out, size_t at,
              bool may_reuse = false);
  // Decodes exactly out.size() symbols (rows of `width`) from all of `in`; with `reused`, a stream
  // without tables, coded with the ones of the last stream this decoded. Malformed input is
  // InvalidArgument naming what is wrong (the kept tables stay); never reads or writes out of
  // bounds.
  absl::Status Decode(absl::Span<const uint8_t> in, size_t width, absl::Span<int32_t> out,
                      bool reused = false);

 private:
  struct Tables {
    size_t width = 0, count = 0;             // count: of groups used (0: none yet)
    std::vector<uint8_t> group;              // Per column.
    std::vector<uint32_t> table;             // Per column: its group's table (dense index).
    std::vector<uint16_t> freq, cumulative;  // Per table and token.
    std::vector<uint8_t> slot_token;         // Per table, 4096 slots (decode).
  };

  // Reads the tables at in[*at] into fresh_, moving *at past them.
  absl::Status ReadTables(absl::Span<const uint8_t> in, size_t width, size_t* at);

  std::vector<uint8_t> tokens_;                 // One per symbol (encode).
  std::vector<uint64_t> magnitude_;             // Per column, summed (encode).
  std::vector<uint32_t> counts_, kept_counts_;  // Per table and token (encode).
  Tables kept_, fresh_;
  std::vector<uint8_t> renormalised_, written_tables_;
};

}  // namespace strait::compression
