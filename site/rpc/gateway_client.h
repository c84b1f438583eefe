// A site's gRPC connection to the gateway: Join, then two Exchange streams (a primary stream for
// pulls, acks, heartbeats and reports, and a push stream), each with a reader thread. Pushes follow
// the credit protocol (gateway.proto, Hello): a frame's body is sent only within the standing
// credit the gateway granted or after the gateway granted the frame's offer, so a push waiting for
// memory waits here, in the site, never as bytes parked in the gateway's gRPC buffers.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/job_spec.h"
#include "site/exchange/gateway_link.h"
#include "strait/v1/gateway.grpc.pb.h"

namespace strait::site {

class GatewayClient final : public GatewayLink {
 public:
  struct Options {
    std::string address;  // host:port of the gateway
    // Mutual TLS with the site's certificate (site/rpc/tls_credentials.h): the gateway knows the
    // site by it.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    std::chrono::milliseconds heartbeat{1000};
    std::chrono::seconds join_timeout{10};
    uint64_t max_frame_bytes = 1ull << 30;  // Deliveries larger than this are refused.
    // Frames are pushed in pieces of about this many bytes (CutIntoPieces); the gateway forwards
    // each piece as it arrives (gateway.proto, Deliver). JobSpec gateway.chunk_size.
    size_t chunk_bytes = GatewaySpec{}.chunk_size;
    // Control handler from the start (a neighbour's key may arrive right after the Join); OnControl
    // replaces it.
    std::function<void(const v1::Control&)> on_control;
    // Called once, on a reader's thread, when a stream ends without Close() (the gateway died or
    // dropped this site, or the link broke); no pull or push fails from the loss before it returns.
    std::function<void(const absl::Status&)> on_disconnect;
  };

  // Joins and opens both streams. Blocks up to join_timeout for the Join, and up to join_timeout
  // more for the push stream's initial credit (gateway.proto, Hello). The Join's status on refusal
  // (e.g. PERMISSION_DENIED), UNAVAILABLE when the gateway cannot be reached.
  static absl::StatusOr<std::unique_ptr<GatewayClient>> Connect(Options options,
                                                                const v1::JoinRequest& join);
  // Closes the streams (Close()).
  ~GatewayClient() override;

  const v1::JoinReply& join_reply() const { return join_reply_; }

  // Sends the frame now when the push stream's standing credit covers it; otherwise offers it and
  // blocks until the gateway grants it (flow control) or answers the offer (refused, or the key is
  // held already: then the body is not sent and the future carries the answer).
  std::future<absl::Status> Push(v1::FrameHeader header, std::string body) override;
  std::future<absl::StatusOr<ReceivedFrame>> Pull(const v1::TensorKey& key,
                                                  std::chrono::milliseconds timeout) override;
  void Ack(const v1::TensorKey& key) override;
  void Report(const v1::SiteReport& report) override;
  void OnControl(std::function<void(const v1::Control&)> handler) override;

  // Ends both streams; pending pushes and pulls fail with UNAVAILABLE. Idempotent. Returns the
  // primary stream's final status.
  absl::Status Close();
  // Number of stream errors the gateway reported (malformed or refused messages).
  uint64_t stream_errors() const { return stream_errors_; }

 private:
  using Stream = grpc::ClientReaderWriter<v1::SiteMessage, v1::GatewayMessage>;
  enum class OfferState { kWaiting, kGranted, kAnswered };
  struct PendingPull {
    std::promise<absl::StatusOr<ReceivedFrame>> promise;
    ReceivedFrame frame;
    uint32_t next_chunk = 0;
  };

  explicit GatewayClient(Options options);
  absl::Status Start(const v1::JoinRequest& join);
  bool WritePrimary(const v1::SiteMessage& message);
  void ReadPrimary();
  void ReadPushAcks();
  void HandleDeliver(v1::Deliver& deliver);
  void Heartbeats();
  void FailPending(const absl::Status& status);
  // Calls options_.on_disconnect once, unless Close() was called; every caller returns after it.
  void NotifyDisconnect(const absl::Status& status);

  const Options options_;
  std::unique_ptr<v1::Gateway::Stub> stub_;
  v1::JoinReply join_reply_;
  grpc::ClientContext primary_context_, push_context_;
  std::unique_ptr<Stream> primary_, push_;
  std::mutex primary_write_mu_, push_write_mu_;

  std::mutex mu_;  // Guards the pending maps, the handler and closed_.
  std::map<uint64_t, std::promise<absl::Status>> pending_pushes_;
  std::map<uint64_t, PendingPull> pending_pulls_;
  // Credit protocol state of the push stream (guarded by mu_): standing credit not yet used, and
  // the offers whose Push call waits for their grant (push_cv_).
  uint64_t push_credit_ = 0;
  std::map<uint64_t, OfferState> offers_;
  bool push_ended_ = false;       // The push stream's reader stopped: no grant will come.
  bool primary_ended_ = false;    // The primary stream's reader stopped: no Deliver will come.
  bool credit_answered_ = false;  // The gateway's first PushCredit (maybe of 0 bytes) arrived.
  std::condition_variable push_cv_;
  std::function<void(const v1::Control&)> control_handler_;
  uint64_t next_id_ = 1;
  bool closed_ = false;
  std::condition_variable heartbeat_cv_;

  std::atomic<uint64_t> stream_errors_{0};
  std::once_flag disconnect_once_;
  std::thread primary_reader_, push_reader_, heartbeat_;
};

}  // namespace strait::site
