// A sealed frame as the gateway holds it (DESIGN.md §4): header plus body chunks, immutable once
// complete and shared by pointer between the mailbox and the streams that deliver it, so the body is
// copied once (out of the producer's messages) and never again.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "strait/v1/tensor.pb.h"

namespace strait::gateway {

// The routing identity of a frame inside one federation (the job name is checked on arrival).
struct MailboxKey {
  uint64_t step = 0;
  uint32_t microbatch = 0;
  uint32_t boundary = 0;
  int direction = 0;      // v1::Direction
  uint32_t generation = 0;
  int purpose = 0;        // v1::Purpose

  static MailboxKey From(const v1::TensorKey& key) {
    return {key.step(), key.microbatch(), key.boundary(), static_cast<int>(key.direction()),
            key.generation(), static_cast<int>(key.purpose())};
  }
  auto Tuple() const { return std::tie(generation, step, purpose, microbatch, boundary, direction); }
  bool operator<(const MailboxKey& o) const { return Tuple() < o.Tuple(); }
  bool operator==(const MailboxKey& o) const { return Tuple() == o.Tuple(); }
};

struct StoredFrame {
  v1::FrameHeader header;
  std::vector<std::string> chunks;  // Body pieces in order; sizes sum to header.wire_bytes().
  std::chrono::steady_clock::time_point stored_at;

  uint64_t wire_bytes() const { return header.wire_bytes(); }
};

using FramePtr = std::shared_ptr<const StoredFrame>;

}  // namespace strait::gateway
