// DiLoCo outer rounds (training.sync outer): a stage's replicas train apart and average their
// pseudo-gradients (the round's start minus now, plus this replica's error feedback) through
// ReplicaMeans, low-bit when outer.bits says so; each applies the outer optimizer
// (site/nn/outer_optimizer.h) to the round's start, so all replicas take the same result.
//
// With outer.fragments P > 1 (Streaming DiLoCo) each round carries one fragment of the parameters
// (site/pipeline/outer_schedule.h), and with outer.delay d it is sent after update s and
// lands after update s + d: the inner steps between run while the sum is out, and landing adds the
// round's result minus the fragment's parameters at sending to the parameters now (a rebase, which
// keeps the local progress since). A fixed landing step keeps runs, and replays after a rollback,
// deterministic. After the run's last step one round over every value, landing at once, leaves
// every replica with the same parameters. Under 2bw a round lands on the newest weights, which the
// next update builds on; a microbatch forwarded before the landing whose backward runs after it
// sees the landed weights there (deterministic, and only the fragment's values moved).
//
// Called by SiteRunner between steps, on the training thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "site/nn/outer_optimizer.h"
#include "site/pipeline/outer_schedule.h"
#include "site/pipeline/outer_state.h"
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

  // Before a step: the first call takes the stage's parameters as the start of values that have
  // none yet, and sends again the rounds a restored state holds pending (this generation's masks).
  absl::Status Begin();
  // After the update that makes L_k, k = `steps_done` (each step's update, in order; deferred 2bw's
  // come a step late): lands the rounds due, then sends the one that starts (or, after the last,
  // the round over every value).
  absl::Status AfterUpdate(int64_t steps_done);

  // What the rounds carry from step to step (outer_state.h), for checkpoints; and its restoration
  // (INVALID_ARGUMENT for a state of another stage or layout).
  std::vector<float> State() const;
  absl::Status SetState(std::span<const float> state);

 private:
  struct InFlight {
    PendingRound round;
    PendingSum sum;
  };
  ValueRange RangeOf(int fragment) const;  // fragment -1: every value.
  SumFormat FormatOf(int fragment, ValueRange range) const;
  absl::Status Open(int fragment, int64_t steps_done);
  absl::Status Land(InFlight& flight, int64_t steps_done);

  StageFrames& frames_;
  const int64_t total_steps_;
  const int every_, fragments_, delay_;
  const size_t n_;
  ReplicaMeans& means_;
  StageExecutor& stage_;
  OuterOptimizer optimizer_;
  OuterState state_;  // momentum_ lives in optimizer_; state_.momentum is filled for State().
  std::vector<InFlight> in_flight_;
  bool begun_ = false;
};

}  // namespace strait::site
