// DiLoCo outer rounds (training.sync outer): a stage's replicas train apart and, after every
// outer.every-th step's update and after the last, average their pseudo-gradients (the round's
// start minus now, plus this replica's error feedback) through ReplicaMeans, low-bit when
// outer.bits says so; each applies the outer optimizer (site/nn/outer_optimizer.h) to the round's
// start, so all replicas begin the next round from the same parameters.
//
// Called by SiteRunner between steps, on the training thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "site/nn/outer_optimizer.h"
#include "site/pipeline/replica_means.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {

class OuterRounds {
 public:
  // The rounds of a run of `total_steps` of the stage of `frames`. `frames`, `means` and `stage`
  // must outlive this.
  OuterRounds(StageFrames& frames, int64_t total_steps, ReplicaMeans& means, StageExecutor& stage);

  // Whether `spec` averages its replicas in outer rounds.
  static bool Used(const JobSpec& spec);

  // Before a step: the round this generation starts in began with the stage's parameters now
  // (taken once).
  absl::Status Begin();
  // After the update that completes `steps_done` steps: a round when one is due.
  absl::Status MaybeRound(int64_t steps_done);

  // What the rounds carry from one to the next (the outer optimizer's momentum, this replica's
  // error feedback, the last round's mean), for checkpoints taken between steps at a round's end;
  // and its restoration (INVALID_ARGUMENT for a state of another size).
  std::vector<float> State() const;
  absl::Status SetState(std::span<const float> state);

 private:
  StageFrames& frames_;
  const int64_t total_steps_;
  ReplicaMeans& means_;
  StageExecutor& stage_;
  OuterOptimizer optimizer_;
  std::vector<float> start_;      // The parameters the current round started from.
  std::vector<float> residual_;   // Error feedback: what quantisation left of the deltas.
  std::vector<float> last_mean_;  // The last round's mean delta (its scales: masked_sum.h).
};

}  // namespace strait::site
