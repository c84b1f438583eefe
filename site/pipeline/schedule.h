// The order in which one pipeline stage runs the forward and backward passes of a step's microbatches
// (DESIGN.md §4). Both schedules run the backward passes in microbatch order 0..M-1, so parameter
// gradients accumulate in the same order as single-process training (bit-identical results).
//   gpipe: all forwards, then all backwards; up to M microbatches of activations held.
//   1f1b:  (S - s - 1) warm-up forwards, then one forward / one backward, then the remaining
//          backwards; at most S - s microbatches held by stage s (PipeDream-flush).
#pragma once

#include <vector>

#include "core/job_spec.h"

namespace strait::site {

struct ScheduleOp {
  enum Kind { kForward, kBackward } kind;
  int microbatch;
  bool operator==(const ScheduleOp& o) const { return kind == o.kind && microbatch == o.microbatch; }
};

// The ops of stage `stage` (0-based) of `stages` for one step of `microbatches` microbatches.
std::vector<ScheduleOp> StageSchedule(Schedule schedule, int stages, int stage, int microbatches);

// The most microbatches whose activations the stage holds at once under that schedule.
int MaxInFlight(const std::vector<ScheduleOp>& ops);

}  // namespace strait::site
