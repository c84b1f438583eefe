// Reassembles the frames a producer pushes chunk by chunk on its Exchange stream, checking every
// message: a transfer starts with chunk 0 carrying a valid header, chunks arrive in order, none is
// larger than kMaxChunkBytes, the bytes never exceed and finally equal the header's wire_bytes.
// Each chunk is added to the transfer's frame as it arrives (the frame may be delivered while it
// grows: stored_frame.h); a transfer that fails or is dropped breaks its frame off.
//
// One assembler per stream; not thread-safe (a stream's messages are handled one at a time).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "gateway/mailbox/stored_frame.h"
#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

class FrameAssembler {
 public:
  // `spec` must outlive the assembler. At most `max_open_transfers` frames may be incomplete at
  // once.
  FrameAssembler(const JobSpec& spec, uint64_t max_frame_bytes, size_t max_open_transfers = 8);

  // What one chunk did. A one-chunk frame both starts and completes.
  struct Event {
    uint64_t transfer_id = 0;
    bool started = false;    // Chunk 0 arrived: reserve frame->wire_bytes() before reading on.
    bool completed = false;  // The last chunk arrived: `frame` is complete.
    std::shared_ptr<StoredFrame> frame;  // The transfer's frame, with this chunk added.
  };

  // Adds one pushed chunk. On error the transfer it belongs to is dropped (its frame broken off),
  // and *dropped is set to that frame if the transfer had started with an earlier chunk (the caller
  // frees its bytes), else null (also when this chunk 0 started it and broke it at once: no
  // reservation was made for it yet).
  absl::StatusOr<Event> Add(v1::PushChunk chunk, std::shared_ptr<StoredFrame>* dropped);

  // Forgets an incomplete transfer and breaks its frame off; returns the frame (null when unknown).
  std::shared_ptr<StoredFrame> Drop(uint64_t transfer_id);
  // Forgets every incomplete transfer (the stream ended), breaking their frames off; returns them.
  std::vector<std::shared_ptr<StoredFrame>> DropAll();
  // Whether `transfer_id` has started and is not complete.
  bool IsOpen(uint64_t transfer_id) const { return open_.count(transfer_id) > 0; }
  // Number of incomplete transfers.
  size_t open_transfers() const { return open_.size(); }

 private:
  struct Partial {
    std::shared_ptr<StoredFrame> frame;
    uint32_t next_index = 1;
    uint64_t received = 0;
  };

  const JobSpec& spec_;
  const uint64_t max_frame_bytes_;
  const size_t max_open_transfers_;
  std::map<uint64_t, Partial> open_;
};

}  // namespace strait::gateway
