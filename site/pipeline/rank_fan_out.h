// The leader's side of one mirrored call (rank_call.h): the call to every follower, this
// process's part, then the followers' results. Used by RankMirror and its state; from the one
// thread that drives the leader's stage.
#pragma once

#include <functional>

#include "absl/status/status.h"
#include "site/pipeline/rank_call.h"

namespace strait::site {

class RankFanOut {
 public:
  explicit RankFanOut(RankPeers& peers) : peers_(peers) {}  // Not owned; must outlive this.

  int ranks() const { return peers_.ranks(); }
  RankPeers& peers() const { return peers_; }

  // Sends make(r) to every follower r, runs `local` (only when every call went out: without every
  // follower the local part could wait forever in a collective), then hands each follower's result
  // to take(r, result) (when given), in rank order. The first error wins, and every call sent is
  // awaited.
  absl::Status Run(const std::function<RankCall(int rank)>& make,
                   const std::function<absl::Status()>& local,
                   const std::function<absl::Status(int rank, RankResult&)>& take = nullptr) const;

 private:
  RankPeers& peers_;
};

}  // namespace strait::site
