#include "plan/step_time_bound.h"

#include <gtest/gtest.h>

#include <string>

namespace strait::plan {
namespace {

BoundInput Uniform(int stages, int microbatches, StageCost cost, SiteLink link,
                   double frame_bytes = 0) {
  BoundInput in;
  in.microbatches = microbatches;
  in.stages.assign(stages, cost);
  in.links.assign(stages, link);
  in.forward_frame_bytes.assign(stages - 1, frame_bytes);
  in.backward_frame_bytes.assign(stages - 1, frame_bytes);
  return in;
}

TEST(StepTimeBound, OneMicrobatchWalksThePipelineThereAndBack) {
  // F0, cross, F1, B1, cross, B0, update of stage 0; a crossing is two one-way delays.
  BoundInput in =
      Uniform(2, 1, {.forward_s = 1, .backward_s = 2, .update_s = 0.5}, {.one_way_delay_s = 10});
  const StepBound b = StepTimeLowerBound(in);
  EXPECT_DOUBLE_EQ(b.path_s, 1 + 20 + 1 + 2 + 20 + 2 + 0.5);
  EXPECT_DOUBLE_EQ(b.path_delay_s, 40);
  EXPECT_EQ(b.crossings, 2);
  EXPECT_EQ(b.bandwidth_s, 0);
  EXPECT_EQ(b.limited_by, "latency");
  EXPECT_DOUBLE_EQ(b.step_s, b.path_s);
}

TEST(StepTimeBound, ZeroLatencyPipelineTakesMPlusSMinusOneSlots) {
  for (Schedule schedule : {Schedule::kGPipe, Schedule::k1F1B}) {
    BoundInput in = Uniform(3, 4, {.forward_s = 1, .backward_s = 2}, {});
    in.schedule = schedule;
    const StepBound b = StepTimeLowerBound(in);
    EXPECT_DOUBLE_EQ(b.path_s, (4 + 3 - 1) * 3.0) << ToString(schedule);
    EXPECT_EQ(b.limited_by, "compute");
  }
}

TEST(StepTimeBound, ClippingsNormTripOverlapsTheNextStepsForwardPass) {
  BoundInput in =
      Uniform(2, 1, {.forward_s = 1, .backward_s = 2, .update_s = 0.5}, {.one_way_delay_s = 10});
  in.clip = true;
  // The scale reaches stage 1 (one more crossing) while stage 0's next forward frame is on its way.
  EXPECT_DOUBLE_EQ(StepTimeLowerBound(in).path_s, 46.5);
  // A long update on stage 1 can only start once the scale arrived: now it is on the critical path.
  in.stages[1].update_s = 5;
  // The scale leaves stage 0 at 46 and arrives at 66; stage 1 takes its next forward at 71,
  // not 67.5.
  EXPECT_DOUBLE_EQ(StepTimeLowerBound(in).path_s, 46.5 + 3.5);
  in.clip = false;
  EXPECT_DOUBLE_EQ(StepTimeLowerBound(in).path_s, 46.5);
}

TEST(StepTimeBound, SlowLinksMakeItBandwidthBound) {
  // 1 MB frames each way over 1 MB/s links: the middle site's link carries 2 MB up per microbatch.
  BoundInput in =
      Uniform(3, 4, {.forward_s = 0.01, .backward_s = 0.01}, {.bytes_per_second = 1e6}, 1e6);
  const StepBound b = StepTimeLowerBound(in);
  EXPECT_DOUBLE_EQ(b.bandwidth_s, 8.0);
  EXPECT_GE(b.step_s, 8.0);
  EXPECT_GT(b.path_transfer_s, 0);
}

TEST(StepTimeBound, TheSlowestStageSetsTheSteadyRate) {
  BoundInput in = Uniform(3, 8, {.forward_s = 1, .backward_s = 1}, {});
  in.stages[1] = {.forward_s = 3, .backward_s = 3};
  const StepBound b = StepTimeLowerBound(in);
  // The middle stage is busy 8 x 6 s per step; the fill and drain of the others add to it.
  EXPECT_GE(b.path_s, 48);
  EXPECT_LE(b.path_s, 48 + 4 * 2);
}

TEST(StepTimeBound, TwoBwHasNoFlush) {
  // Zero latency: the stream keeps every stage busy, M x (forward + backward) per step.
  BoundInput in = Uniform(3, 4, {.forward_s = 1, .backward_s = 2}, {});
  in.schedule = Schedule::k2BW;
  EXPECT_DOUBLE_EQ(StepTimeLowerBound(in).path_s, 4 * 3.0);
  // High latency with clipping: 1f1b pays the chain's round trips every step; 2bw overlaps them
  // with the next step's work, though with at most S - s microbatches in flight per stage it is
  // still latency-bound: stage 0 keeps 3 microbatches in flight per round trip of 4 crossings.
  BoundInput far =
      Uniform(3, 4, {.forward_s = 1, .backward_s = 2, .update_s = 0.5}, {.one_way_delay_s = 10});
  far.clip = true;
  const double flushed = StepTimeLowerBound(far).path_s;
  far.schedule = Schedule::k2BW;
  const StepBound stream = StepTimeLowerBound(far);
  EXPECT_LT(stream.path_s, flushed * 0.7) << flushed;
  EXPECT_GE(stream.path_s, 4.0 / 3 * 4 * 20);
  EXPECT_EQ(stream.limited_by, "latency");
}

TEST(StepTimeBound, QueuedLinksAreTheBoundWhenFramesNeverMeet) {
  // One microbatch: one frame at a time on every link.
  BoundInput in = Uniform(2, 1, {.forward_s = 1, .backward_s = 2},
                          {.one_way_delay_s = 10, .bytes_per_second = 1e6}, 1e6);
  const StepBound one = StepTimeLowerBound(in);
  EXPECT_DOUBLE_EQ(one.queued_s, one.path_s);
  EXPECT_DOUBLE_EQ(one.queued_wait_s, 0);
  // Unlimited links: frames take no time on them, so nothing queues.
  BoundInput fast = Uniform(3, 8, {.forward_s = 1, .backward_s = 2}, {.one_way_delay_s = 10}, 1e6);
  const StepBound free = StepTimeLowerBound(fast);
  EXPECT_DOUBLE_EQ(free.queued_s, free.path_s);
}

TEST(StepTimeBound, FramesQueueBehindEachOtherOnABusyLink) {
  // Two stages, no compute, no delay, 1 MB frames over 1 MB/s links. Alone on the links both
  // forward frames arrive at 1 s and both backward frames at 2 s: path 2 s, and each link carries
  // 2 MB per step each way: bandwidth 2 s. Queued, the second forward frame waits for the first
  // (arrives at 2 s), so its backward frame arrives at 3 s. The flush makes that a bound: stage 0's
  // link sends both forward frames (2 s), and after the last of them a backward frame still has to
  // come back (1 s).
  BoundInput in = Uniform(2, 2, {}, {.bytes_per_second = 1e6}, 1e6);
  const StepBound b = StepTimeLowerBound(in);
  EXPECT_DOUBLE_EQ(b.path_s, 2);
  EXPECT_DOUBLE_EQ(b.bandwidth_s, 2);
  EXPECT_DOUBLE_EQ(b.link_s, 3);
  EXPECT_DOUBLE_EQ(b.step_s, 3);
  EXPECT_EQ(b.limited_by, "link");
  EXPECT_DOUBLE_EQ(b.queued_s, 3);
  EXPECT_DOUBLE_EQ(b.queued_wait_s, 1);
  // 2bw has no flush: the next step's frames fill the link meanwhile.
  in.schedule = Schedule::k2BW;
  EXPECT_DOUBLE_EQ(StepTimeLowerBound(in).link_s, 2);
  // Slower compute spreads the frames out: with 1 s per pass they never meet.
  in.schedule = Schedule::k1F1B;
  in.stages.assign(2, {.forward_s = 1, .backward_s = 1});
  const StepBound spread = StepTimeLowerBound(in);
  EXPECT_DOUBLE_EQ(spread.queued_s, spread.path_s);
}

TEST(StepTimeBound, AFlushedLinkCannotOverlapTheStepsLatency) {
  // Two stages, 1 s one-way delays, no compute, two 1 MB frames each way on 1 MB/s links. Stage
  // 0's uplink is busy 2 s; its first frame can leave at 0, and after its last one leaves, the
  // frame crosses (2 s of delay) and its backward frame comes back (2 s of delay, 1 s of bytes):
  // 2 + 5 = 7 s. The path sees every frame alone: 6 s.
  BoundInput in = Uniform(2, 2, {}, {.one_way_delay_s = 1, .bytes_per_second = 1e6}, 1e6);
  const StepBound b = StepTimeLowerBound(in);
  EXPECT_DOUBLE_EQ(b.path_s, 6);
  EXPECT_DOUBLE_EQ(b.link_s, 7);
  EXPECT_DOUBLE_EQ(b.queued_s, 7);
  // Compute before the first frame and after the last backward one adds to it: stage 0's forward
  // (head) and backward and update (tail); stage 1's forward and backward come after the last
  // forward frame.
  in.stages.assign(2, {.forward_s = 0.1, .backward_s = 0.2, .update_s = 0.5});
  EXPECT_DOUBLE_EQ(StepTimeLowerBound(in).link_s, 0.1 + 2 + (2 + 0.1 + 0.2 + 3 + 0.2 + 0.5));
}

// The queued model runs the schedule on links that carry one frame at a time: an execution the
// links allow, so no lower bound may exceed it.
TEST(StepTimeBound, QueuedModelNeverBeatsTheBound) {
  for (Schedule schedule : {Schedule::kGPipe, Schedule::k1F1B, Schedule::k2BW}) {
    for (int extra : {0, 4, 40}) {
      for (bool slow_middle : {false, true}) {
        BoundInput in = Uniform(3, 8, {.forward_s = 0.002, .backward_s = 0.004, .update_s = 0.01},
                                {.one_way_delay_s = 0.075, .bytes_per_second = 12.5e6}, 128 << 10);
        in.schedule = schedule;
        in.extra_in_flight = extra;
        in.clip = extra != 4;
        if (slow_middle) {
          in.links[1] = {.one_way_delay_s = 0.3, .bytes_per_second = 2.5e6};
          in.stages[2].backward_s = 0.02;
          in.backward_frame_bytes[0] = 32 << 10;
        }
        const StepBound b = StepTimeLowerBound(in);
        const std::string where = std::string(ToString(schedule)) + " extra " +
                                  std::to_string(extra) + (slow_middle ? " slow middle" : "");
        EXPECT_GE(b.queued_s, b.path_s - 1e-9) << where;
        EXPECT_GE(b.queued_s, b.link_s - 1e-9) << where;
        EXPECT_GE(b.link_s, b.bandwidth_s) << where;
      }
    }
  }
}

}  // namespace
}  // namespace strait::plan
