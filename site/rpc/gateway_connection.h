// A site's connection to the gateway across joins (DESIGN.md §5, §7): each join is a new epoch with
// a fresh signed link key (LinkSecurity); after a loss it joins again with backoff and jitter for
// at most the reconnect timeout. It hands out one GatewayLink that always talks through the current
// GatewayClient, and closes that client when it is closed or destroyed, whatever path its owner
// takes out.
//
// Join, Rejoin, Close and security() are for the owner's thread; link() may be used from any.
// The header keeps grpcpp out of its includers: only site/rpc/ sees the gRPC client.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "core/job_spec.h"
#include "core/job_view.h"
#include "crypto/certificates.h"
#include "crypto/deny_list.h"
#include "site/rpc/gateway_connector.h"

namespace strait::site {

class GatewayClient;

class GatewayConnection final : public GatewayConnector, private GatewayLink {
 public:
  struct Options {
    const JobSpec* spec = nullptr;  // Must outlive the connection; gateway.address is dialled.
    // The split every join claims (the site's as it started) and whether it is planned; null: the
    // file's (JobView::Initial). Must outlive the connection.
    const JobView* view = nullptr;
    int index = 0;            // This site's stage in spec->sites.
    int teacher_stage = -1;   // A teacher site: its teacher stage (then `index` is unused).
    int64_t total_steps = 0;  // Claimed in every JoinRequest (the gateway checks it).
    // The site's certificate and key with the federation CA: the mutual TLS identity, and the key
    // that signs each epoch's link key.
    crypto::TlsMaterial tls;
    crypto::DenyList deny_list;  // Revoked neighbours' certificates.
    double reconnect_timeout_s = 300;
    std::chrono::seconds join_timeout{10};  // Per join attempt.
    // No join uses a smaller epoch: a process that joins again through a new connection (a site
    // whose ranks failed) passes the last one's epoch() + 1.
    uint32_t min_epoch = 0;
  };

  // Does not connect yet (Join does). `events` are called as ConnectionEvents says.
  GatewayConnection(Options options, ConnectionEvents events);
  // Close().
  ~GatewayConnection() override;

  absl::StatusOr<v1::JoinReply> Join(std::optional<int64_t> checkpoint) override;
  absl::StatusOr<v1::JoinReply> Rejoin(std::optional<int64_t> checkpoint) override;
  GatewayLink& link() override { return *this; }
  const LinkSecurity* security() const override { return security_.get(); }
  uint32_t epoch() const { return epoch_; }  // Of the newest join attempt (0 before any).

  // Ends the current connection's streams (GatewayClient::Close) and returns the final status of
  // its primary stream; OK when there is none. Idempotent; the connection may join again after.
  absl::Status Close();

 private:
  struct Dial;  // The gRPC client's options (site/rpc/gateway_client.h).

  // GatewayLink, through the current client (see GatewayConnector::link). Thread-safe.
  std::future<absl::Status> Push(v1::FrameHeader header, std::string body) override;
  std::future<absl::StatusOr<ReceivedFrame>> Pull(const v1::TensorKey& key,
                                                  std::chrono::milliseconds timeout) override;
  void Ack(const v1::TensorKey& key) override;
  void Report(const v1::SiteReport& report) override;
  void OnControl(std::function<void(const v1::Control&)> handler) override;

  std::shared_ptr<GatewayClient> current() const;
  const std::string& address() const { return options_.spec->gateway.address; }

  const Options options_;
  const ConnectionEvents events_;
  std::unique_ptr<Dial> dial_;
  uint32_t epoch_ = 0;                      // Of the newest join attempt.
  std::unique_ptr<LinkSecurity> security_;  // This epoch's link key; null before the first join.

  mutable std::mutex mu_;  // Guards client_ (the pipeline's and the reporter's threads use it).
  // Shared with calls in flight on other threads, so that a Rejoin never frees it under them.
  std::shared_ptr<GatewayClient> client_;
};

}  // namespace strait::site
