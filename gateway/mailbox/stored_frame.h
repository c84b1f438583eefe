// A sealed frame as the gateway holds it (DESIGN.md §4): header plus body chunks.
//
// Frames are streamed through the gateway, not stored and then forwarded: a frame enters the
// mailbox when its first chunk arrives and grows chunk by chunk while its consumer's delivery reads
// each chunk as soon as it is there, so a frame crosses the gateway one chunk behind its producer
// instead of one whole frame (issue 9). A frame ends complete, or broken off (its producer's
// transfer failed, or the mailbox dropped it) and then never grows again. Chunks never change once
// added, so the frame is shared by pointer between the mailbox and the streams that deliver it and
// its body is copied once (out of the producer's messages).
//
// Thread-safe: one producer adds chunks while any number of readers read the chunks already there.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "strait/v1/tensor.pb.h"

namespace strait::gateway {

// The routing identity of a frame inside one federation (the job name is checked on arrival).
struct MailboxKey {
  uint64_t step = 0;
  uint32_t microbatch = 0;
  uint32_t boundary = 0;
  int direction = 0;  // v1::Direction
  uint32_t generation = 0;
  int purpose = 0;  // v1::Purpose
  uint32_t replica = 0;

  static MailboxKey From(const v1::TensorKey& key) {
    return {key.step(),       key.microbatch(),
            key.boundary(),   static_cast<int>(key.direction()),
            key.generation(), static_cast<int>(key.purpose()),
            key.replica()};
  }
  auto Tuple() const {
    return std::tie(generation, step, purpose, replica, microbatch, boundary, direction);
  }
  bool operator<(const MailboxKey& o) const { return Tuple() < o.Tuple(); }
  bool operator==(const MailboxKey& o) const { return Tuple() == o.Tuple(); }
};

class StoredFrame {
 public:
  // A frame whose header.chunk_count() chunks will be added one by one (AddChunk).
  explicit StoredFrame(v1::FrameHeader header);
  // A complete frame.
  StoredFrame(v1::FrameHeader header, std::vector<std::string> chunks);

  StoredFrame(const StoredFrame&) = delete;
  StoredFrame& operator=(const StoredFrame&) = delete;

  const v1::FrameHeader header;
  const std::chrono::steady_clock::time_point created_at = std::chrono::steady_clock::now();

  uint64_t wire_bytes() const { return header.wire_bytes(); }
  uint32_t chunk_count() const { return header.chunk_count(); }
  // Chunks [0, available()) are there to read.
  uint32_t available() const;
  bool complete() const { return available() == chunk_count(); }
  bool broken() const;
  // Chunk `index` < available(); the reference stays valid as long as the frame.
  const std::string& chunk(uint32_t index) const;

  // Returns true when chunk `index` is there or the frame is broken now. Otherwise returns false
  // and calls `ready` once, later, from the thread that adds that chunk or breaks the frame (never
  // under the frame's lock, so `ready` may read the frame).
  bool WhenAvailable(uint32_t index, std::function<void()> ready) const;

  // Producer side. Adds the next chunk; ignored once the frame is complete or broken.
  void AddChunk(std::string data);
  // The frame will never be complete: wakes every reader waiting for a chunk. Idempotent; no-op on
  // a complete frame. Const because the mailbox, which shares the frame read-only, may drop a frame
  // that is still arriving (a rollback, or its producer pushing it again).
  void BreakOff() const;

 private:
  // Calls, outside mu_, the waiters whose chunk is now there (all of them once broken).
  void WakeWaiters() const;

  mutable std::mutex mu_;
  std::deque<std::string> chunks_;  // A deque: adding a chunk never moves the ones being read.
  mutable bool broken_ = false;
  mutable std::vector<std::pair<uint32_t, std::function<void()>>> waiters_;  // (chunk index, ready)
};

using FramePtr = std::shared_ptr<const StoredFrame>;

}  // namespace strait::gateway
