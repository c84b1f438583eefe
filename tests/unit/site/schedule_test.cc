// Pipeline schedules: every microbatch forward once and backward once, backward in microbatch order
// (the fidelity invariant), the activation bound of each schedule, and no deadlock when all stages
// run their schedules against each other's dependencies; for 2bw the same across step boundaries,
// plus the weight versions each pass uses and the updates' dependencies on the clipping chain.
#include "core/schedule.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "site/pipeline/weight_history.h"

namespace strait::site {
namespace {

using Op = ScheduleOp;

TEST(ScheduleTest, OneFOneBOfAThreeStagePipeline) {
  EXPECT_EQ(StageSchedule(Schedule::k1F1B, 3, 0, 4), (std::vector<Op>{{Op::kForward, 0},
                                                                      {Op::kForward, 1},
                                                                      {Op::kForward, 2},
                                                                      {Op::kBackward, 0},
                                                                      {Op::kForward, 3},
                                                                      {Op::kBackward, 1},
                                                                      {Op::kBackward, 2},
                                                                      {Op::kBackward, 3}}));
  EXPECT_EQ(StageSchedule(Schedule::k1F1B, 3, 2, 4), (std::vector<Op>{{Op::kForward, 0},
                                                                      {Op::kBackward, 0},
                                                                      {Op::kForward, 1},
                                                                      {Op::kBackward, 1},
                                                                      {Op::kForward, 2},
                                                                      {Op::kBackward, 2},
                                                                      {Op::kForward, 3},
                                                                      {Op::kBackward, 3}}));
  EXPECT_EQ(StageSchedule(Schedule::kGPipe, 3, 1, 2),
            (std::vector<Op>{
                {Op::kForward, 0}, {Op::kForward, 1}, {Op::kBackward, 0}, {Op::kBackward, 1}}));
}

// Runs every stage's schedule as far as dependencies allow: F(s, m) needs F(s-1, m); B(s, m) needs
// B(s+1, m). Returns true when all ops complete.
bool RunsToCompletion(Schedule schedule, int stages, int microbatches, int extra = 0) {
  std::vector<std::vector<Op>> ops(stages);
  std::vector<size_t> next(stages, 0);
  std::vector<std::vector<bool>> forward_done(stages, std::vector<bool>(microbatches)),
      backward_done(stages, std::vector<bool>(microbatches));
  for (int s = 0; s < stages; ++s) ops[s] = StageSchedule(schedule, stages, s, microbatches, extra);
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
        for (int extra : {0, 1, 5}) {
          SCOPED_TRACE(testing::Message() << ToString(schedule) << " S=" << stages
                                          << " M=" << microbatches << " extra in flight " << extra);
          for (int s = 0; s < stages; ++s) {
            const std::vector<Op> ops = StageSchedule(schedule, stages, s, microbatches, extra);
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
            const int in_flight = WarmupForwards(stages, s, extra) + 1;
            EXPECT_EQ(MaxInFlight(ops), schedule == Schedule::k1F1B
                                            ? std::min(in_flight, microbatches)
                                            : microbatches);
          }
          EXPECT_TRUE(RunsToCompletion(schedule, stages, microbatches, extra));
        }
      }
    }
  }
}

TEST(ScheduleTest, ExtraInFlightGoesToStagesInProportionToTheirRoundTrip) {
  // 4 stages: round trips of 6, 4, 2 and 0 crossings; 6 extra microbatches -> 6, 4, 2, 0.
  EXPECT_EQ(WarmupForwards(4, 0, 6), 3 + 6);
  EXPECT_EQ(WarmupForwards(4, 1, 6), 2 + 4);
  EXPECT_EQ(WarmupForwards(4, 2, 6), 1 + 2);
  EXPECT_EQ(WarmupForwards(4, 3, 6), 0);
  // Shares round up, so every stage with a round trip gets at least one.
  EXPECT_EQ(WarmupForwards(3, 1, 1), 1 + 1);
  EXPECT_EQ(WarmupForwards(1, 0, 8), 0);  // One stage: nothing to wait for.
  for (int stages = 1; stages <= 5; ++stages) {
    for (int s = 0; s < stages; ++s) EXPECT_EQ(WarmupForwards(stages, s, 0), stages - s - 1);
  }
}

// The ops of steps first_step .. last_step concatenated (what a runner resumed at first_step runs).
std::vector<Op> RunOps(Schedule schedule, int stages, int stage, int microbatches,
                       int64_t first_step, int64_t last_step, int extra = 0,
                       UpdateTiming update = UpdateTiming::kDeferred) {
  std::vector<Op> ops;
  for (int64_t t = first_step; t <= last_step; ++t) {
    const std::vector<Op> step =
        StepOps({schedule, stages, stage, microbatches, extra, update}, t, {first_step, last_step});
    ops.insert(ops.end(), step.begin(), step.end());
  }
  return ops;
}

TEST(ScheduleTest, TwoBwStreamOfAThreeStagePipeline) {
  // Stage 0 of 3, M = 3, steps 0..2. Step 1: the update of step 0's gradient (L_1) comes right
  // before F(2, 0), the first forward that uses L_1. Step 0: the warm-up F(0, 0), F(0, 1) first,
  // and no update (L_0 is the initial weights).
  const std::vector<Op> stage0_step1 = {
      {Op::kForward, 2, 1},  {Op::kBackward, 0, 1}, {Op::kUpdate, 0, 0},   {Op::kForward, 0, 2},
      {Op::kBackward, 1, 1}, {Op::kForward, 1, 2},  {Op::kBackward, 2, 1}, {Op::kClipNorm, 0, 1}};
  EXPECT_EQ(StepOps({Schedule::k2BW, 3, 0, 3}, 1, {0, 2}), stage0_step1);
  const std::vector<Op> stage0_step0 = {
      {Op::kForward, 0, 0},  {Op::kForward, 1, 0},  {Op::kForward, 2, 0},
      {Op::kBackward, 0, 0}, {Op::kForward, 0, 1},  {Op::kBackward, 1, 0},
      {Op::kForward, 1, 1},  {Op::kBackward, 2, 0}, {Op::kClipNorm, 0, 0}};
  EXPECT_EQ(StepOps({Schedule::k2BW, 3, 0, 3}, 0, {0, 2}), stage0_step0);
  // The last stage applies step t-1's gradient at the end of step t; the last step also its own.
  const std::vector<Op> last_stage_last_step = {
      {Op::kForward, 0, 1},  {Op::kBackward, 0, 1}, {Op::kForward, 1, 1}, {Op::kBackward, 1, 1},
      {Op::kClipNorm, 0, 1}, {Op::kUpdate, 0, 0},   {Op::kUpdate, 0, 1}};
  EXPECT_EQ(StepOps({Schedule::k2BW, 3, 2, 2}, 1, {0, 1}), last_stage_last_step);
  // 1f1b: the step's schedule, then its norm and update.
  std::vector<Op> one = StageSchedule(Schedule::k1F1B, 3, 1, 4);
  for (Op& op : one) op.step = 5;
  one.push_back({Op::kClipNorm, 0, 5});
  one.push_back({Op::kUpdate, 0, 5});
  EXPECT_EQ(StepOps({Schedule::k1F1B, 3, 1, 4}, 5, {0, 9}), one);
}

TEST(ScheduleTest, TwoBwEagerUpdatesRightAfterTheStepsLastBackward) {
  // Stage 0 of 3, M = 3 (warm-up 2): the same forwards and backwards as deferred, and the update
  // of step t right after its own norm, in every step.
  const std::vector<Op> stage0_step0 = {
      {Op::kForward, 0, 0},  {Op::kForward, 1, 0},  {Op::kForward, 2, 0}, {Op::kBackward, 0, 0},
      {Op::kForward, 0, 1},  {Op::kBackward, 1, 0}, {Op::kForward, 1, 1}, {Op::kBackward, 2, 0},
      {Op::kClipNorm, 0, 0}, {Op::kUpdate, 0, 0}};
  EXPECT_EQ(StepOps({Schedule::k2BW, 3, 0, 3, 0, UpdateTiming::kEager}, 0, {0, 2}), stage0_step0);
  const std::vector<Op> stage0_step1 = {
      {Op::kForward, 2, 1}, {Op::kBackward, 0, 1}, {Op::kForward, 0, 2},  {Op::kBackward, 1, 1},
      {Op::kForward, 1, 2}, {Op::kBackward, 2, 1}, {Op::kClipNorm, 0, 1}, {Op::kUpdate, 0, 1}};
  EXPECT_EQ(StepOps({Schedule::k2BW, 3, 0, 3, 0, UpdateTiming::kEager}, 1, {0, 2}), stage0_step1);
  // So microbatches 0 and 1 of step 1 (run before the update of step 0) compute with L_0, the
  // rest with L_1; the last stage (warm-up 0) always with the newest.
  TrainingSpec t;
  t.schedule = Schedule::k2BW;
  t.microbatches = 3;
  t.update = UpdateTiming::kEager;
  EXPECT_EQ(ForwardWeights(t, 3, 0, 1, 0), 0);
  EXPECT_EQ(ForwardWeights(t, 3, 0, 1, 1), 0);
  EXPECT_EQ(ForwardWeights(t, 3, 0, 1, 2), 1);
  EXPECT_EQ(ForwardWeights(t, 3, 1, 1, 0), 0);
  EXPECT_EQ(ForwardWeights(t, 3, 1, 1, 1), 1);
  EXPECT_EQ(ForwardWeights(t, 3, 2, 1, 0), 1);
  EXPECT_EQ(ForwardWeights(t, 3, 0, 0, 2), 0);
  t.extra_in_flight = 4;  // Stage 0 warms up min(2 + 4, M - 1) = 2, stage 1 min(1 + 2, 2) = 2.
  EXPECT_EQ(ForwardWeights(t, 3, 1, 5, 1), 4);
  t.update = UpdateTiming::kDeferred;  // Every microbatch one update behind.
  EXPECT_EQ(ForwardWeights(t, 3, 2, 5, 2), 4);
  EXPECT_EQ(ForwardWeights(t, 3, 0, 0, 0), 0);
  t.schedule = Schedule::k1F1B;
  EXPECT_EQ(ForwardWeights(t, 3, 0, 5, 0), 5);
}

// Every stage's whole run (steps first_step .. last_step) against each other's dependencies:
// F(s, t, m) needs F(s-1, t, m); B(s, t, m) needs B(s+1, t, m); the clipping norm of step t on
// stage s needs stage s+1's (the sum of squares travels up), and the update of t on stage s > 0
// needs stage s-1's (the scale travels down; stage 0 makes it from its own norm). Returns true
// when every op completes.
// Eager updates need no clipping (the job spec checks it): their norms and updates wait for nothing
// on other stages.
bool StreamRunsToCompletion(Schedule schedule, int stages, int microbatches, int64_t first_step,
                            int64_t last_step, int extra = 0,
                            UpdateTiming update = UpdateTiming::kDeferred) {
  const bool clipping = update == UpdateTiming::kDeferred;
  using Key = std::tuple<int, int64_t, int>;  // (kind, step, microbatch)
  std::vector<std::vector<Op>> ops(stages);
  std::vector<size_t> next(stages, 0);
  std::vector<std::set<Key>> done(stages);
  for (int s = 0; s < stages; ++s) {
    ops[s] = RunOps(schedule, stages, s, microbatches, first_step, last_step, extra, update);
  }
  auto has = [&](int s, Op::Kind kind, int64_t step, int m) {
    return done[s].count({kind, step, m}) > 0;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      if (next[s] == ops[s].size()) continue;
      const Op op = ops[s][next[s]];
      bool ready = true;
      switch (op.kind) {
        case Op::kForward:
          ready = s == 0 || has(s - 1, Op::kForward, op.step, op.microbatch);
          break;
        case Op::kBackward:
          ready = s + 1 == stages || has(s + 1, Op::kBackward, op.step, op.microbatch);
          break;
        case Op::kClipNorm:
          ready = !clipping || s + 1 == stages || has(s + 1, Op::kClipNorm, op.step, 0);
          break;
        case Op::kUpdate:
          ready = !clipping || (s == 0 ? has(0, Op::kClipNorm, op.step, 0)
                                       : has(s - 1, Op::kUpdate, op.step, 0));
          break;
      }
      if (!ready) continue;
      done[s].insert({op.kind, op.step, op.microbatch});
      ++next[s];
      progress = true;
    }
  }
  for (int s = 0; s < stages; ++s) {
    if (next[s] != ops[s].size()) return false;
  }
  return true;
}

// Dropped stale gradients: a stage's gradient becomes the mean over its M - w fresh microbatches
// (none are stale at step 0); clipping under eager updates lags one step.
TEST(ScheduleTest, KeptGradientScaleAndLaggedClip) {
  TrainingSpec t;
  t.schedule = Schedule::k2BW;
  t.microbatches = 4;
  t.update = UpdateTiming::kEager;
  t.grad_clip = 1.0;
  EXPECT_TRUE(LaggedClip(t));
  EXPECT_EQ(KeptGradientScale(t, 3, 0, 1), 1.0f);  // Stale gradients kept.
  t.stale_gradients = StaleGradients::kDrop;
  EXPECT_EQ(KeptGradientScale(t, 3, 0, 0), 1.0f);
  EXPECT_EQ(KeptGradientScale(t, 3, 0, 1), 2.0f);  // Warm-up 2 of 4.
  EXPECT_EQ(KeptGradientScale(t, 3, 1, 1), 4.0f / 3.0f);
  EXPECT_EQ(KeptGradientScale(t, 3, 2, 1), 1.0f);  // The last stage is never stale.
  t.update = UpdateTiming::kDeferred;
  EXPECT_EQ(KeptGradientScale(t, 3, 0, 1), 1.0f);
  EXPECT_FALSE(LaggedClip(t));
  t.update = UpdateTiming::kEager;
  t.grad_clip = 0.0;
  EXPECT_FALSE(LaggedClip(t));
}

TEST(ScheduleTest, TwoBwStreamInvariantsForManyShapes) {
  for (int stages = 1; stages <= 5; ++stages) {
    for (int microbatches = stages; microbatches <= 7; ++microbatches) {
      for (int64_t first_step : {0, 3}) {
        for (auto [extra, update] :
             {std::pair{0, UpdateTiming::kDeferred}, std::pair{2, UpdateTiming::kDeferred},
              std::pair{0, UpdateTiming::kEager}, std::pair{2, UpdateTiming::kEager}}) {
          const int64_t last_step = first_step + 4;
          SCOPED_TRACE(testing::Message()
                       << "S=" << stages << " M=" << microbatches << " from step " << first_step
                       << " extra in flight " << extra << " update " << ToString(update));
          TrainingSpec training;
          training.schedule = Schedule::k2BW;
          training.microbatches = microbatches;
          training.extra_in_flight = extra;
          training.update = update;
          for (int s = 0; s < stages; ++s) {
            const std::vector<Op> ops = RunOps(Schedule::k2BW, stages, s, microbatches, first_step,
                                               last_step, extra, update);
            // Forwards and backwards each in global microbatch order, every one exactly once.
            int64_t next_forward = first_step * microbatches, next_backward = next_forward;
            // The weight versions a stage holds (site/pipeline/weight_history.h): L_k and L_{k-1}.
            int64_t newest = first_step, updates_seen = 0;
            std::map<int64_t, int64_t> held;  // global microbatch -> weights of its forward
            std::set<int64_t> norms;
            int most_held = 0;
            int64_t weights = 0;
            for (const Op& op : ops) {
              const int64_t n = op.step * microbatches + op.microbatch;
              switch (op.kind) {
                case Op::kForward:
                  ASSERT_EQ(n, next_forward++);
                  // The weights of its step are held: the newest, or the previous one (only
                  // right after a resume, for the resumed step itself).
                  // Eager: always the newest, but for the resumed step's warm-up.
                  weights = ForwardWeights(training, stages, s, op.step, op.microbatch);
                  ASSERT_TRUE(weights == newest ||
                              (op.step == first_step && first_step > 0 && weights == newest - 1))
                      << "forward of step " << op.step << " with newest L_" << newest;
                  held[n] = weights;
                  most_held = std::max(most_held, static_cast<int>(held.size()));
                  break;
                case Op::kBackward:
                  ASSERT_EQ(n, next_backward++);
                  ASSERT_EQ(held.count(n), 1u) << "backward before forward";
                  ASSERT_GE(held[n], std::max<int64_t>(newest - 1, 0))
                      << "its weights were dropped";
                  held.erase(n);
                  break;
                case Op::kClipNorm:
                  // After the step's last backward.
                  ASSERT_EQ(next_backward, (op.step + 1) * microbatches);
                  norms.insert(op.step);
                  break;
                case Op::kUpdate:
                  ASSERT_EQ(op.step, newest) << "updates in order, each once";
                  ASSERT_EQ(norms.count(op.step), 1u) << "update before its norm";
                  // No microbatch still computes with L_{newest-1}, which the update drops.
                  for (const auto& [m, weights] : held) ASSERT_EQ(weights, newest) << m;
                  ++newest;
                  ++updates_seen;
                  break;
              }
            }
            EXPECT_EQ(next_forward, (last_step + 1) * microbatches);
            EXPECT_EQ(next_backward, next_forward);
            EXPECT_EQ(newest, last_step + 1);  // The run ends with L_T.
            EXPECT_EQ(updates_seen, last_step + 1 - first_step);
            EXPECT_LE(most_held, std::min(WarmupForwards(stages, s, extra) + 1, microbatches));
          }
          EXPECT_TRUE(StreamRunsToCompletion(Schedule::k2BW, stages, microbatches, first_step,
                                             last_step, extra, update));
        }
      }
    }
  }
  for (Schedule schedule : {Schedule::k1F1B, Schedule::kGPipe}) {
    EXPECT_TRUE(StreamRunsToCompletion(schedule, 4, 5, 0, 3));
  }
}

}  // namespace
}  // namespace strait::site
