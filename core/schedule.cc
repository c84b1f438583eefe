#include "core/schedule.h"

#include <algorithm>

namespace strait {

int WarmupForwards(int stages, int stage, int extra_in_flight) {
  const int crossings = stages - 1 - stage, most = stages - 1;
  const int share = most == 0 ? 0 : (extra_in_flight * crossings + most - 1) / most;  // Rounded up.
  return stages - stage - 1 + share;
}

std::vector<ScheduleOp> StageSchedule(Schedule schedule, int stages, int stage, int microbatches,
                                      int extra_in_flight) {
  std::vector<ScheduleOp> ops;
  ops.reserve(2 * microbatches);
  const int warmup = schedule == Schedule::kGPipe
                         ? microbatches
                         : std::min(WarmupForwards(stages, stage, extra_in_flight), microbatches);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) ops.push_back({ScheduleOp::kForward, next_forward});
  // Steady state: each new forward is followed by the oldest outstanding backward.
  for (; next_forward < microbatches; ++next_forward) {
    ops.push_back({ScheduleOp::kForward, next_forward});
    ops.push_back({ScheduleOp::kBackward, next_backward++});
  }
  for (; next_backward < microbatches; ++next_backward)
    ops.push_back({ScheduleOp::kBackward, next_backward});
  return ops;
}

int MaxInFlight(const std::vector<ScheduleOp>& ops) {
  int held = 0, most = 0;
  for (const ScheduleOp& op : ops) {
    if (op.kind == ScheduleOp::kForward) ++held;
    if (op.kind == ScheduleOp::kBackward) --held;
    most = std::max(most, held);
  }
  return most;
}

int StreamWarmup(int stages, int stage, int microbatches, int extra_in_flight) {
  // w < M keeps the held microbatches' indices distinct (the job spec asks for M >= S).
  return std::max(0, std::min(WarmupForwards(stages, stage, extra_in_flight), microbatches - 1));
}

int64_t ForwardWeights(const TrainingSpec& training, int stages, int stage, int64_t step,
                       int microbatch) {
  if (training.schedule != Schedule::k2BW) return step;
  if (step == 0) return 0;
  if (training.update == UpdateTiming::kDeferred) return step - 1;
  const int warmup = StreamWarmup(stages, stage, training.microbatches, training.extra_in_flight);
  return microbatch < warmup ? step - 1 : step;
}

bool LaggedClip(const TrainingSpec& training) {
  return training.schedule == Schedule::k2BW && training.update == UpdateTiming::kEager &&
         training.grad_clip > 0.0;
}

bool DropsStaleGradients(const TrainingSpec& training) {
  return training.schedule == Schedule::k2BW && training.update == UpdateTiming::kEager &&
         training.stale_gradients == StaleGradients::kDrop;
}

float KeptGradientScale(const TrainingSpec& training, int stages, int stage, int64_t step) {
  if (!DropsStaleGradients(training) || step == 0) return 1.0f;
  const int m = training.microbatches;
  const int stale = StreamWarmup(stages, stage, m, training.extra_in_flight);
  return static_cast<float>(m) / static_cast<float>(m - stale);
}

namespace {

// 2bw: see StepOps.
std::vector<ScheduleOp> StreamStepOps(const StageStepping& stepping, int64_t step, StepSpan run) {
  const int microbatches = stepping.microbatches;
  const int64_t m = microbatches;
  const int64_t first_step = run.first_step, last_step = run.last_step;
  const UpdateTiming update = stepping.update;
  const int warmup =
      StreamWarmup(stepping.stages, stepping.stage, microbatches, stepping.extra_in_flight);
  std::vector<ScheduleOp> ops;
  auto forward = [&](int64_t n) {
    if (n / m <= last_step) ops.push_back({ScheduleOp::kForward, static_cast<int>(n % m), n / m});
  };
  if (step == first_step) {
    for (int j = 0; j < warmup; ++j) forward(step * m + j);
  }
  // Deferred: the update of step - 1's gradient makes L_step, which step + 1's forwards use; a run
  // resumed at first_step starts from the checkpoint made right after the update of
  // first_step - 1. Eager: each step's update follows its own last backward.
  bool updated = update == UpdateTiming::kEager || step - 1 < first_step;
  for (int j = 0; j < microbatches; ++j) {
    const int64_t n = step * m + j + warmup;
    if (!updated && n == (step + 1) * m) {
      ops.push_back({ScheduleOp::kUpdate, 0, step - 1});
      updated = true;
    }
    forward(n);
    ops.push_back({ScheduleOp::kBackward, j, step});
  }
  ops.push_back({ScheduleOp::kClipNorm, 0, step});
  if (!updated) ops.push_back({ScheduleOp::kUpdate, 0, step - 1});  // Last stage (w = 0).
  if (update == UpdateTiming::kEager || step == last_step) {
    ops.push_back({ScheduleOp::kUpdate, 0, step});
  }
  return ops;
}

}  // namespace

std::vector<ScheduleOp> StepOps(const StageStepping& stepping, int64_t step, StepSpan run) {
  if (stepping.schedule == Schedule::k2BW) return StreamStepOps(stepping, step, run);
  std::vector<ScheduleOp> ops = StageSchedule(stepping.schedule, stepping.stages, stepping.stage,
                                              stepping.microbatches, stepping.extra_in_flight);
  for (ScheduleOp& op : ops) op.step = step;
  ops.push_back({ScheduleOp::kClipNorm, 0, step});
  ops.push_back({ScheduleOp::kUpdate, 0, step});
  return ops;
}

}  // namespace strait
