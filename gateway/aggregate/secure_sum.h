// The gateway's side of secure aggregation (DESIGN.md §5, crypto/pairwise_masks.h): the replicas of
// a stage each hand in their masked fixed-point vector of a round; once all have, the gateway adds
// them mod 2^32 (the replicas' masks cancel there) and answers every one of them with the sum. It
// holds no mask key: what it receives from one replica is indistinguishable from random words.
//
// A round is (stage, step, generation). A vector from a site that is not a replica of the stage, a
// second one from the same replica, one for a round already summed (a replay) or of an older
// generation, or one of another length than the round's first, is refused and counted. A replica
// that fails aborts every open round of its stage: the federation rolls back, as for any site
// failure (there is no dropout recovery; docs/security.md says why).
//
// Handler logic only; thread-safe; callbacks run without the lock held.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strait::gateway {

struct SumRound {
  int stage = 0;
  uint64_t step = 0;
  uint32_t generation = 0;
  auto operator<=>(const SumRound&) const = default;
};

class SecureSum {
 public:
  using Done = std::function<void(absl::StatusOr<std::vector<uint32_t>>)>;

  // `replicas[s]`: the site ids of stage s's replicas (at least two each).
  explicit SecureSum(std::vector<std::vector<std::string>> replicas);

  // Takes `site`'s masked vector of `round`. `done` is called once: with the sum when the stage's
  // last replica's vector is in (possibly inside this call), or ABORTED when the round is aborted.
  // A refusal is returned (and `done` not called): PERMISSION_DENIED for a site that is not a
  // replica of the stage, ALREADY_EXISTS for a second vector or a replayed round,
  // FAILED_PRECONDITION for a round of an older generation, INVALID_ARGUMENT for another length.
  //
  // `lanes` (1, 2, 4 or 8): each word packs that many numbers of 32 / lanes bits, summed lane by
  // lane mod 2^(32 / lanes) (a replica's narrower fixed point: site/exchange/masked_sum.h). Every
  // vector of a round must have the same (INVALID_ARGUMENT otherwise).
  absl::Status Add(const std::string& site, const SumRound& round, std::vector<uint32_t> words,
                   Done done, int lanes = 1);

  // `site` failed: every open round of its stages is aborted with `why`.
  void Abort(const std::string& site, const std::string& why);

  // Vectors refused so far, by the status code's name ("PERMISSION_DENIED", ...).
  std::map<std::string, uint64_t> Refused() const;

 private:
  struct Open {
    std::vector<uint32_t> sum;
    int lanes = 1;
    std::set<std::string> from;
    std::vector<Done> waiting;
  };
  absl::Status Refuse(absl::Status status);  // Under mu_.

  const std::vector<std::vector<std::string>> replicas_;
  mutable std::mutex mu_;
  std::map<SumRound, Open> open_;
  std::set<SumRound> summed_;  // Of the newest generation only.
  uint32_t newest_generation_ = 0;
  std::map<std::string, uint64_t> refused_;
};

}  // namespace strait::gateway
