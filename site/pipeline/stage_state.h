// The checkpointed state of a stage (weights, their versions, gradients, optimizer state) as whole
// parameters in host memory: what checkpoints save and load, what layers carry when they move and
// what replicas average. Reached through StageExecutor (its getters and setters are these); the
// implementations are a process's workers' (local_state.h) and, on the leader of several ranks,
// the site's (rank_mirror.h). Called by the one thread that drives the stage; blocking.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace strait::site {

// A part of the state, in host memory (RankOp::kReadShard reads a follower's).
enum class ShardedState { kParams, kPrevious, kLookahead, kGrads, kOptimizer };

class StageState {
 public:
  virtual ~StageState() = default;

  // A host copy of part `which` (of the gradient of step `step`), parameters in layout order
  // (layer by layer, param by param; the optimizer's arenas side by side). Every worker of every
  // rank holds the same replicated state; with tensor parallelism the leader assembles the shards
  // into whole parameters. kParams: the newest weights L_k; kPrevious, kLookahead, kGrads:
  // WeightHistory's Previous, Lookahead, Grads.
  virtual absl::StatusOr<std::vector<float>> Read(ShardedState which, int64_t step) const = 0;
  absl::StatusOr<std::vector<float>> Params() const { return Read(ShardedState::kParams, 0); }
  absl::StatusOr<std::vector<float>> PreviousParams() const {
    return Read(ShardedState::kPrevious, 0);
  }
  absl::StatusOr<std::vector<float>> LookaheadParams() const {
    return Read(ShardedState::kLookahead, 0);
  }
  absl::StatusOr<std::vector<float>> Grads(int64_t step) const {
    return Read(ShardedState::kGrads, step);
  }
  absl::StatusOr<std::vector<float>> OptimizerState() const {
    return Read(ShardedState::kOptimizer, 0);
  }

  // The setters write every worker of every rank. SetParams overwrites the newest weights (the
  // version number stays); RestoreWeights: WeightHistory::Restore.
  virtual absl::Status SetParams(absl::Span<const float> params) = 0;
  virtual absl::Status RestoreWeights(int64_t version, absl::Span<const float> newest,
                                      absl::Span<const float> previous,
                                      absl::Span<const float> lookahead) = 0;
  virtual absl::Status SetOptimizerState(absl::Span<const float> state) = 0;
  // Overwrites the gradient of `step` on every worker of every rank (the replicas' mean of it:
  // JobSpec::replicas).
  virtual absl::Status SetGrads(int64_t step, absl::Span<const float> grads) = 0;
};

}  // namespace strait::site
