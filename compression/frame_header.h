// The compact binary header every encoded tensor starts with, so that a frame decodes alone
// (DESIGN.md §6; a klt frame also needs the basis an earlier frame of its link carried).
// Little-endian:
//   0   4  magic "STCF"
//   4   1  format version (1)
//   5   1  dtype of the values (1 = fp32)
//   6   1  rank R (0..8)
//   7   1  stage count S (1..4)
//   8   8  raw size: bytes of the fp32 values (4 * product of the dims)
//   16  8R dims
//   then S stage records of 18 bytes, in encoding order:
//       1 kind (StageKind), 1 flags (bit 0 sr: int8, int4, klt; bit 1 ef), 8 parameter (int8/int4:
//       block size; topk: the fraction, klt: the step, as IEEE double bits; shuffle: width; zstd:
//       level as int64; proj: K; else 0), 8 encoded size: bytes this stage produced
//     a proj record has 8 more bytes: the basis seed (a decoder that does not know kind 8 refuses
//     the frame before reading them)
//   then the payload: the last stage's output.
#pragma once

#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compression/chain_spec.h"

namespace strait::compression {

inline constexpr uint8_t kFrameVersion = 1;
inline constexpr uint8_t kDtypeFloat32 = 1;
inline constexpr int kMaxRank = 8;

using Shape = absl::InlinedVector<uint64_t, kMaxRank>;

struct FrameHeader {
  ChainSpec chain;
  Shape shape;
  uint64_t raw_size = 0;                         // 4 * element count
  absl::InlinedVector<uint64_t, 4> stage_sizes;  // encoded size of each stage, encoding order
  uint64_t header_size = 0;                      // where the payload starts
};

// Bytes of a header for this rank and stage count, without proj.
inline constexpr uint64_t FrameHeaderSize(size_t rank, size_t stages) {
  return 16 + 8 * rank + 18 * stages;
}
inline constexpr uint64_t kProjectRecordExtra = 8;  // the seed

// Bytes of a header for this rank and chain (any chain).
uint64_t FrameHeaderSize(size_t rank, const ChainSpec& chain);

// Product of the dims, or an error when it overflows or the rank exceeds kMaxRank.
absl::StatusOr<uint64_t> ElementCount(absl::Span<const uint64_t> shape);

// Writes `header` into out[0, FrameHeaderSize(...)). `out` must be at least that long.
void WriteFrameHeader(const FrameHeader& header, uint8_t* out);

// Parses and checks the header at the start of `frame`: magic, version, dtype, rank, a valid chain,
// raw size = 4 * elements <= max_raw_bytes, and the last stage size = the payload's length. The
// per-stage size checks are the stages' own (CodecStage::CheckSizes). Never reads past `frame`.
absl::Status ParseFrameHeader(absl::Span<const uint8_t> frame, uint64_t max_raw_bytes,
                              FrameHeader* header);

}  // namespace strait::compression
