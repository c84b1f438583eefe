// The order in which one pipeline stage runs the forward and backward passes of the microbatches
// (DESIGN.md §4). Every schedule runs the backward passes of a step in microbatch order 0..M-1, so
// parameter gradients accumulate in the same order as single-process training (bit-identical
// results).
//   gpipe: all forwards, then all backwards; up to M microbatches of activations held.
//   1f1b:  (S - s - 1) warm-up forwards, then one forward / one backward, then the remaining
//          backwards; at most S - s microbatches held by stage s (PipeDream-flush). Each step ends
//          with a flush: clipping norm, update, then the next step's warm-up.
//   2bw:   PipeDream-2BW. One continuous 1F1B stream over the whole run: on stage s, with warm-up
//          w = S - s - 1 and global microbatch n = t * M + m (step t, microbatch m), forwards
//          F(0 .. w-1), then pairs F(n + w), B(n) for n = 0, 1, ... (forwards past the last step
//          skipped). No flush: step t+1's forwards start while step t's backwards come back, so
//          a link's latency is paid once per run, not per step. Step t computes with the weights
//          of one update before, L_{max(t-1, 0)} (site/pipeline/weight_history.h), so the update
//          of step t's gradient can wait until right before the stage's first forward of step t+2,
//          by which time its clipping scale has travelled the chain. At most S - s microbatches
//          held by stage s, across step boundaries; needs M >= S (the job spec checks it) so that
//          they have distinct indices within their steps.
//   2bw with training.update eager: the same stream, but the stage applies the update of step t
//          right after its own last backward of t, clipped with step t - 1's norm (LaggedClip;
//          kClipNorm sends step t's on). Its next forwards compute with L_{t+1}; only the w it
//          ran before that backward (microbatches 0 .. w-1 of step t+1) compute with L_t
//          (ForwardWeights). The staleness now depends on the stage and the warm-up, not the step:
//          stage 0 with a deep warm-up is mostly stale, the last stage (w = 0) never.
#pragma once

#include <cstdint>
#include <vector>

#include "core/job_spec.h"

namespace strait {

struct ScheduleOp {
  enum Kind {
    kForward,   // Forward pass of microbatch `microbatch` of `step`.
    kBackward,  // Its backward pass.
    kClipNorm,  // The gradient of `step` is complete: this stage's part of its clipping norm.
    kUpdate,    // Applies the gradient of `step` (scaled by its clipping scale): L_{step+1}.
  } kind;
  int microbatch = 0;  // kForward, kBackward.
  int64_t step = 0;
  bool operator==(const ScheduleOp& o) const {
    return kind == o.kind && microbatch == o.microbatch && step == o.step;
  }
};

// Warm-up forwards of stage `stage` of `stages` under 1f1b and 2bw: 1F1B's S - s - 1, plus a
// share of `extra_in_flight` (training.extra_in_flight) in proportion to the link crossings of the
// stage's round trip to the last stage and back, 2 (S - 1 - s): stage 0 gets all of it, the last
// stage none. More warm-up means more microbatches in flight to cover a slow link's round trip;
// backward passes keep their order, so the results keep their bits.
int WarmupForwards(int stages, int stage, int extra_in_flight);

// The forwards and backwards of stage `stage` (0-based) of `stages` for one step of
// `microbatches` microbatches run alone (step 0, with a flush before and after). For 2bw this is
// the 1f1b order: its steady state runs the same pairs, only across step boundaries (StepOps).
std::vector<ScheduleOp> StageSchedule(Schedule schedule, int stages, int stage, int microbatches,
                                      int extra_in_flight = 0);

// The most microbatches whose activations the stage holds at once while running `ops`.
int MaxInFlight(const std::vector<ScheduleOp>& ops);

// What fixes one stage's ops in every step: its place in the pipeline and the schedule's knobs.
struct StageStepping {
  Schedule schedule = Schedule::k1F1B;
  int stages = 1;
  int stage = 0;
  int microbatches = 1;
  int extra_in_flight = 0;
  UpdateTiming update = UpdateTiming::kDeferred;
};

// The steps of a run: from `first_step` (0, or the checkpoint it resumed from) to `last_step`.
struct StepSpan {
  int64_t first_step = 0;
  int64_t last_step = 0;
};

// What SiteRunner::Step(step) runs on stage `stage` of `stages`, in the run `run`:
//   1f1b, gpipe: StageSchedule's ops of `step`, then kClipNorm and kUpdate of `step`.
//   2bw: the stream's pairs whose backward belongs to `step` (Step(first_step) first runs the
//     warm-up forwards), kClipNorm of `step` after its last backward, kUpdate of `step` - 1
//     right before the stage's first forward of `step` + 1 (at the end of the step on the last
//     stage; skipped at `first_step`, whose checkpoint holds that update already), and at
//     `last_step` the final kUpdate of `step`.
// Concatenating the steps from first_step to last_step gives every forward and backward once.
// With 2bw the warm-up is at most M - 1 forwards whatever extra_in_flight asks: the microbatches
// held across a step boundary must have distinct indices within their steps.
// With update eager (2bw), the kUpdate of `step` comes right after its kClipNorm, in every step.
std::vector<ScheduleOp> StepOps(const StageStepping& stepping, int64_t step, StepSpan run);

// 2bw: the forwards stage `stage` runs ahead of its backwards (WarmupForwards, at most M - 1).
int StreamWarmup(int stages, int stage, int microbatches, int extra_in_flight);

// The weights L_k (k updates applied) that microbatch `microbatch` of `step` computes with on stage
// `stage` of `stages`: `step` under 1f1b and gpipe; under 2bw 0 at step 0, then step - 1 with
// update deferred, and with update eager step - 1 for the stage's first StreamWarmup microbatches
// of the step (run before the update of step - 1) and `step` for the rest.
int64_t ForwardWeights(const TrainingSpec& training, int stages, int stage, int64_t step,
                       int microbatch);

// 2bw with update eager and grad_clip > 0: the update of step t is clipped with the global norm of
// step t - 1's gradient (1 at the first step). A stage applies its update right after its own last
// backward of the step, before the earlier stages' parts of that step's norm could reach it; the
// norm of t - 1 is known at the first stage before the last microbatch of step t enters the
// pipeline, and travels downstream in front of it.
bool LaggedClip(const TrainingSpec& training);

// 2bw with update eager and training.stale_gradients drop: the parameter gradients of each stage's
// warm-up microbatches (computed with the weights of one update before) are dropped
// (weight_history.h).
bool DropsStaleGradients(const TrainingSpec& training);

// What the gradient of `step` on stage `stage` is multiplied by before its clipping norm and update
// so that it is the mean over the microbatches that count: M / (M - w) when stale gradients are
// dropped (training.stale_gradients drop) and the step has w > 0 microbatches computed with the
// weights of one update before; 1 otherwise.
float KeptGradientScale(const TrainingSpec& training, int stages, int stage, int64_t step);

}  // namespace strait
