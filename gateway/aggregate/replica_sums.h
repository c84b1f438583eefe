// Secure aggregation on the wire (DESIGN.md §5, proto Purpose SUM): takes each replica's masked
// vector as it arrives in the mailbox, adds it into the stage's round (secure_sum.h), and once
// every replica's vector is in, stores the sum in the mailbox for each replica to pull (one SUM
// BACKWARD frame per replica). The frames are encoded with the lossless chain `none` and not
// sealed: the gateway reads the words only to add them, and each one alone is masked by streams
// whose keys it never holds.
//
// Thread-safe; never blocks (a sum that does not fit the memory budget yet is stored when the
// mailbox grants its reservation).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "core/job_spec.h"
#include "gateway/aggregate/secure_sum.h"
#include "gateway/mailbox/mailbox.h"
#include "gateway/membership/federation.h"
#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

class ReplicaSums {
 public:
  // `spec`, `mailbox` and `federation` must outlive this.
  ReplicaSums(const JobSpec& spec, Mailbox& mailbox, Federation& federation);

  // `frame` is a complete SUM FORWARD frame that the site in slot `slot` pushed and the mailbox
  // stored. Takes it out of the mailbox (acknowledges it) and adds it to its round; a refused
  // vector (secure_sum.h) is counted under "sum_refused" with the reason.
  void Take(int slot, const FramePtr& frame);

  // `slot`'s site failed: its stage's open rounds are aborted (the federation rolls back).
  void SiteFailed(int slot, const std::string& why);

  struct Stats {
    uint64_t rounds = 0;       // Rounds summed.
    uint64_t bytes_in = 0;     // Wire bytes of the masked vectors taken.
    uint64_t bytes_out = 0;    // Wire bytes of the sums stored (one per replica).
    double round_seconds = 0;  // From each round's first vector to its sum, summed.
  };
  Stats GetStats() const;
  v1::ReplicaSumsState Snapshot() const;

 private:
  // Stores the sum of `round` (words of `lanes` numbers each) for `replica` to pull.
  void Publish(const SumRound& round, uint32_t replica, const std::vector<uint32_t>& sum,
               int lanes);

  const JobSpec& spec_;
  Mailbox& mailbox_;
  Federation& federation_;
  SecureSum sums_;
  mutable std::mutex mu_;
  Stats stats_;
  std::map<SumRound, std::chrono::steady_clock::time_point> opened_;  // Rounds not summed yet.
};

}  // namespace strait::gateway
