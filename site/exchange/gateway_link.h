// What a site's pipeline needs from the gateway (DESIGN.md §4): push a sealed frame by key, pull
// one by key, acknowledge what it consumed, report progress, and hear the gateway's control
// messages. The gRPC client (site/rpc/gateway_client.h) implements it; tests may use an in-process
// fake.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <string>

#include "absl/status/statusor.h"
#include "strait/v1/gateway.pb.h"

namespace strait::site {

struct ReceivedFrame {
  v1::FrameHeader header;
  std::string body;  // header.wire_bytes() bytes: the sealed, encoded tensor.
};

class GatewayLink {
 public:
  virtual ~GatewayLink() = default;

  // Sends a frame; the future resolves when the gateway holds it (or refused it). May block while
  // the gateway's memory is full (flow control). Thread-safe.
  virtual std::future<absl::Status> Push(v1::FrameHeader header, std::string body) = 0;
  // Asks for the frame of `key`; the future resolves with it, or with DEADLINE_EXCEEDED after
  // `timeout`, or UNAVAILABLE if the connection ends. Never blocks. Thread-safe.
  virtual std::future<absl::StatusOr<ReceivedFrame>> Pull(const v1::TensorKey& key,
                                                          std::chrono::milliseconds timeout) = 0;
  // The frame of `key` was consumed: the gateway may forget it. Thread-safe.
  virtual void Ack(const v1::TensorKey& key) = 0;
  // Progress and timings for the dashboard. Thread-safe.
  virtual void Report(const v1::SiteReport& report) = 0;
  // Sets the handler of control messages (called on an internal thread, one at a time).
  virtual void OnControl(std::function<void(const v1::Control&)> handler) = 0;
};

}  // namespace strait::site
