// Pipeline schedules: every microbatch forward once and backward once, backward in microbatch order
// (the fidelity invariant), the activation bound of each schedule, and no deadlock when all stages
// run their schedules against each other's dependencies.
#include "site/pipeline/schedule.h"

#include <gtest/gtest.h>

namespace strait::site {
namespace {

using Op = ScheduleOp;

TEST(ScheduleTest, OneFOneBOfAThreeStagePipeline) {
  EXPECT_EQ(StageSchedule(Schedule::k1F1B, 3, 0, 4),
            (std::vector<Op>{{Op::kForward, 0}, {Op::kForward, 1}, {Op::kForward, 2}, {Op::kBackward, 0},
                             {Op::kForward, 3}, {Op::kBackward, 1}, {Op::kBackward, 2}, {Op::kBackward, 3}}));
  EXPECT_EQ(StageSchedule(Schedule::k1F1B, 3, 2, 4),
            (std::vector<Op>{{Op::kForward, 0}, {Op::kBackward, 0}, {Op::kForward, 1}, {Op::kBackward, 1},
                             {Op::kForward, 2}, {Op::kBackward, 2}, {Op::kForward, 3}, {Op::kBackward, 3}}));
  EXPECT_EQ(StageSchedule(Schedule::kGPipe, 3, 1, 2),
            (std::vector<Op>{{Op::kForward, 0}, {Op::kForward, 1}, {Op::kBackward, 0}, {Op::kBackward, 1}}));
}

// Runs every stage's schedule as far as dependencies allow: F(s, m) needs F(s-1, m); B(s, m) needs
// B(s+1, m). Returns true when all ops complete.
bool RunsToCompletion(Schedule schedule, int stages, int microbatches) {
  std::vector<std::vector<Op>> ops(stages);
  std::vector<size_t> next(stages, 0);
  std::vector<std::vector<bool>> forward_done(stages, std::vector<bool>(microbatches)),
      backward_done(stages, std::vector<bool>(microbatches));
  for (int s = 0; s < stages; ++s) ops[s] = StageSchedule(schedule, stages, s, microbatches);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      if (next[s] == ops[s].size()) continue;
      const Op op = ops[s][next[s]];
      const bool ready = op.kind == Op::kForward
                             ? (s == 0 || forward_done[s - 1][op.microbatch])
                             : (forward_done[s][op.microbatch] &&
                                (s + 1 == stages || backward_done[s + 1][op.microbatch]));
      if (!ready) continue;
      (op.kind == Op::kForward ? forward_done : backward_done)[s][op.microbatch] = true;
      ++next[s];
      progress = true;
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (next[s] != ops[s].size()) return false;
  }
  return true;
}

TEST(ScheduleTest, InvariantsForManyShapes) {
  for (Schedule schedule : {Schedule::k1F1B, Schedule::kGPipe}) {
    for (int stages = 1; stages <= 6; ++stages) {
      for (int microbatches = 1; microbatches <= 9; ++microbatches) {
        SCOPED_TRACE(testing::Message() << ToString(schedule) << " S=" << stages << " M=" << microbatches);
        for (int s = 0; s < stages; ++s) {
          const std::vector<Op> ops = StageSchedule(schedule, stages, s, microbatches);
          ASSERT_EQ(ops.size(), 2u * microbatches);
          std::vector<int> forwards, backwards;
          std::vector<bool> forwarded(microbatches);
          for (const Op& op : ops) {
            if (op.kind == Op::kForward) {
              forwards.push_back(op.microbatch);
              forwarded[op.microbatch] = true;
            } else {
              EXPECT_TRUE(forwarded[op.microbatch]) << "backward before forward";
              backwards.push_back(op.microbatch);
            }
          }
          std::vector<int> in_order(microbatches);
          for (int m = 0; m < microbatches; ++m) in_order[m] = m;
          EXPECT_EQ(forwards, in_order);
          EXPECT_EQ(backwards, in_order);  // gradients accumulate as in single-process training
          EXPECT_LE(MaxInFlight(ops), schedule == Schedule::k1F1B ? std::min(stages - s, microbatches)
                                                                  : microbatches);
        }
        EXPECT_TRUE(RunsToCompletion(schedule, stages, microbatches));
      }
    }
  }
}

}  // namespace
}  // namespace strait::site
