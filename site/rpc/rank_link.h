// The link between a site's leader and its follower ranks, without gRPC (DESIGN.md §4, §5): the
// interfaces site/rpc/rank_server.h and rank_client.h implement and site/daemon/rank_leader.h and
// rank_follower.h use.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "site/collective/rendezvous_store.h"
#include "strait/v1/site_ranks.pb.h"

namespace strait::site {

// The leader's end of one attached follower. Thread-safe.
class FollowerLink {
 public:
  virtual ~FollowerLink() = default;
  // Queues an order for the follower; never blocks on the network. Unavailable once closed.
  virtual absl::Status Send(v1::RankOrder order) = 0;
  // The follower's next answer: Unavailable when the link closed or broke, DeadlineExceeded
  // when none came within `timeout`.
  virtual absl::StatusOr<v1::RankAnswer> Receive(std::chrono::milliseconds timeout) = 0;
  // Ends the stream (the follower sees it end); idempotent.
  virtual void Close() = 0;
  // Whether the follower's end is gone (its stream ended or broke).
  virtual bool gone() const = 0;
};

// What the leader's server asks of the leader. Called on the server's threads.
class RankAdmission {
 public:
  virtual ~RankAdmission() = default;
  // A follower whose certificate names site `certified_site` says `hello`: OK to admit it (then
  // Attached follows), or the error it is refused with.
  virtual absl::Status Admit(const v1::RankHello& hello, const std::string& certified_site) = 0;
  // An admitted follower's link, from `peer` (its address); it stays open until Close or the
  // stream breaks.
  virtual void Attached(int rank, std::shared_ptr<FollowerLink> link, const std::string& peer) = 0;
  // The site's rendezvous store, which StoreSet and StoreGet serve.
  virtual RendezvousStore& store() = 0;
};

// A follower's end of its link to the leader. For one thread, but store() may be used from any.
class LeaderLink {
 public:
  virtual ~LeaderLink() = default;
  // The leader's next order: Unavailable when the stream ended or broke, or the leader's refusal
  // (PermissionDenied, InvalidArgument) as it said it.
  virtual absl::StatusOr<v1::RankOrder> Next() = 0;
  virtual absl::Status Answer(const v1::RankAnswer& answer) = 0;
  virtual RendezvousStore& store() = 0;  // The leader's store, remotely.
};

}  // namespace strait::site
