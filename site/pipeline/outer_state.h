// What OuterRounds carries from one step to the next, and its checkpoint form: a vector of floats
// (CheckpointStore keeps floats), integers bit-cast into them. Version 2 starts with a tag; the
// version 1 layout (momentum, error feedback[, last mean]: 2n or 3n floats, written at a round's
// end by earlier releases) still loads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace strait::site {

// A fragment's round sent and not yet landed.
struct PendingRound {
  int64_t sent_at = 0;  // Steps done when it was sent: its key's step.
  int fragment = 0;
  std::vector<float> sent;           // What was quantised (delta plus error feedback), to resend.
  std::vector<float> local_at_send;  // The fragment's parameters then: the rebase's origin.
};

struct OuterState {
  std::vector<float> momentum;   // The outer optimizer's, n.
  std::vector<float> residual;   // Error feedback, n.
  std::vector<float> last_mean;  // Each value's last round's mean (public), n.
  std::vector<float> start;      // Each value's last round's result, n; empty: the parameters.
  std::vector<uint8_t> synced;   // Per fragment: has had a round (its scales are known).
  std::vector<PendingRound> pending;
};

std::vector<float> SerializeOuterState(const OuterState& state);
// INVALID_ARGUMENT naming what does not fit a stage of `n` parameters in `fragments` fragments.
absl::StatusOr<OuterState> ParseOuterState(std::span<const float> data, int64_t n, int fragments);

}  // namespace strait::site
