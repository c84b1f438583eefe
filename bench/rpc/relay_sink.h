// The far end of `strait bench relay`'s direct stream: a minimal Gateway service that accepts a
// site's pushes and acknowledges each frame as soon as its last chunk arrives, storing nothing. The
// producer talks to it with the same client and messages it uses for the real gateway, so the two
// measurements differ only by the gateway in between.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"

namespace strait::bench {

class RelaySink {
 public:
  // Serves on 127.0.0.1 (port 0: a free one) with `credentials`; calls `on_frames(n)` (on a gRPC
  // thread) each time a frame completes, with the count so far.
  static absl::StatusOr<std::unique_ptr<RelaySink>> Start(
      std::shared_ptr<grpc::ServerCredentials> credentials,
      std::function<void(uint64_t)> on_frames);
  ~RelaySink();
  int port() const { return port_; }

 private:
  class Service;
  RelaySink() = default;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace strait::bench
