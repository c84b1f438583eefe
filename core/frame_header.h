// Checks of a frame header received from the network (proto FrameHeader), shared by the gateway
// (on push) and the sites (on delivery), so both refuse the same malformed frames.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/job_spec.h"
#include "strait/v1/tensor.pb.h"

namespace strait {

// Largest body piece in one FrameChunk message (DESIGN.md §4).
inline constexpr uint64_t kMaxChunkBytes = 1 << 20;

// How a producer cuts a frame of `wire_bytes` into pieces for `chunk_bytes` (gateway.chunk_size):
// equal pieces, as few as hold it with up to 1/64 more than chunk_bytes each (never more than
// kMaxChunkBytes). The slack carries the codec header and the AEAD tag, so that a tensor of exactly
// chunk_bytes (models are made of power-of-two sizes) goes in one piece, not in two halves.
struct FramePieces {
  uint32_t count = 1;
  uint64_t bytes = 0;  // Of each piece but the last, which may be shorter.
};
FramePieces CutIntoPieces(uint64_t wire_bytes, uint64_t chunk_bytes);

// The most wire bytes one frame of this job can have: the largest tensor crossing a boundary (one
// microbatch of activations, fp32, a tied matrix's gradient, or with a planned split the layers
// that move after a re-plan: MaxMoveFloats, or with replicas a stage's parameters as masked
// fixed-point words: MaxSumWords) plus the worst case a lossless
// codec adds, the codec header and the AEAD tag; on klt links, the worst case of its symbols and a
// basis (2 width^2 bytes). The gateway refuses larger frames, and its memory
// budget must hold at least one.
uint64_t MaxFrameWireBytes(const JobSpec& spec);

// Floats of the largest MOVE frame of a planned split (proto Purpose MOVE): two layer indices and
// every layer's weights (each weight version) and optimizer state.
uint64_t MaxMoveFloats(const JobSpec& spec);

// Words of the largest secure-sum vector (proto Purpose SUM) of a job with replicas: the parameters
// of its largest stage; 0 without replicas.
uint64_t MaxSumWords(const JobSpec& spec);

// OK when the header describes a frame this federation can carry: a valid key (ValidateTensorKey),
// dtype FLOAT32, a shape of 1..8 positive dimensions whose size matches raw_bytes, wire_bytes at
// most `max_frame_bytes`, and a chunk_count that can carry wire_bytes in chunks of at most
// kMaxChunkBytes. INVALID_ARGUMENT naming the field otherwise.
absl::Status ValidateFrameHeader(const v1::FrameHeader& header, const JobSpec& spec,
                                 uint64_t max_frame_bytes);

}  // namespace strait
