#include "site/pipeline/schedule.h"

#include <algorithm>

namespace strait::site {

std::vector<ScheduleOp> StageSchedule(Schedule schedule, int stages, int stage, int microbatches) {
  std::vector<ScheduleOp> ops;
  ops.reserve(2 * microbatches);
  const int warmup = schedule == Schedule::kGPipe
                         ? microbatches
                         : std::min(stages - stage - 1, microbatches);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) ops.push_back({ScheduleOp::kForward, next_forward});
  // Steady state: each new forward is followed by the oldest outstanding backward.
  for (; next_forward < microbatches; ++next_forward) {
    ops.push_back({ScheduleOp::kForward, next_forward});
    ops.push_back({ScheduleOp::kBackward, next_backward++});
  }
  for (; next_backward < microbatches; ++next_backward) ops.push_back({ScheduleOp::kBackward, next_backward});
  return ops;
}

int MaxInFlight(const std::vector<ScheduleOp>& ops) {
  int held = 0, most = 0;
  for (const ScheduleOp& op : ops) {
    held += op.kind == ScheduleOp::kForward ? 1 : -1;
    most = std::max(most, held);
  }
  return most;
}

}  // namespace strait::site
