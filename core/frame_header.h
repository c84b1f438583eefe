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

// The most wire bytes one frame of this job can have: the largest tensor crossing a boundary (one
// microbatch of activations, fp32) plus the worst case a lossless codec adds, the codec header and
// the AEAD tag. The gateway refuses larger frames, and its memory budget must hold at least one.
uint64_t MaxFrameWireBytes(const JobSpec& spec);

// OK when the header describes a frame this federation can carry: a valid key (ValidateTensorKey),
// dtype FLOAT32, a shape of 1..8 positive dimensions whose size matches raw_bytes, wire_bytes at
// most `max_frame_bytes`, and a chunk_count that can carry wire_bytes in chunks of at most
// kMaxChunkBytes. INVALID_ARGUMENT naming the field otherwise.
absl::Status ValidateFrameHeader(const v1::FrameHeader& header, const JobSpec& spec,
                                 uint64_t max_frame_bytes);

}  // namespace strait
