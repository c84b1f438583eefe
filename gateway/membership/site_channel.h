// The gateway's outgoing side of one site's Exchange stream. The gRPC reactor implements it; tests
// use an in-process fake. Handler logic talks to sites only through this interface.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "gateway/mailbox/stored_frame.h"
#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

class SiteChannel {
 public:
  virtual ~SiteChannel() = default;
  // Queues a message for the site. Never blocks; thread-safe; never calls back into the caller.
  virtual void Send(v1::GatewayMessage message) = 0;
  // Queues `frame` as Deliver messages answering `pull_id` (header with chunk 0). The frame is
  // shared, not copied, until each chunk is written. Thread-safe; never blocks.
  virtual void SendFrame(uint64_t pull_id, FramePtr frame) = 0;
  // Ends the stream with `status` once queued messages are written. Thread-safe; idempotent.
  virtual void Close(absl::Status status) = 0;
};

}  // namespace strait::gateway
