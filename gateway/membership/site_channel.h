// The gateway's outgoing side of one site's Exchange stream. The gRPC reactor implements it; tests
// use an in-process fake. Handler logic talks to sites only through this interface.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "gateway/mailbox/stored_frame.h"
#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

class SiteChannel {
 public:
  virtual ~SiteChannel() = default;
  // Queues a message for the site. Never blocks; thread-safe; never calls back into the caller.
  virtual void Send(v1::GatewayMessage message) = 0;
  // Queues `frame` as Deliver messages answering `pull_id` (header with chunk 0), each chunk as
  // soon as it is there (the frame may still be arriving). The frame is shared, not copied, until
  // each chunk is written. Should it break off first, tells the site to restart the pull
  // (Deliver.restart, after the chunks already written) and then calls `pull_again`. Thread-safe;
  // never blocks.
  virtual void SendFrame(uint64_t pull_id, FramePtr frame, std::function<void()> pull_again) = 0;
  // Ends the stream with `status` once queued messages are written. Thread-safe; idempotent.
  virtual void Close(absl::Status status) = 0;
};

}  // namespace strait::gateway
