#include "bench/step_time_bound.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <tuple>
#include <utility>

#include "site/pipeline/schedule.h"

namespace strait::bench {
namespace {

// When an op (or a message) is done, and what the path that ends there is made of.
struct Event {
  double time = 0;
  double delay_s = 0, transfer_s = 0;
  int crossings = 0;
};

Event Later(const Event& a, const Event& b) { return a.time >= b.time ? a : b; }

class PathSimulator {
 public:
  explicit PathSimulator(const BoundInput& in)
      : in_(in), stages_(static_cast<int>(in.stages.size())) {
    stage_free_.resize(stages_);
    done_.resize(stages_);
  }

  // Runs `steps` steps of the schedule's op stream (site::StepOps: with 2bw the steps overlap);
  // the time every stage finished its update of each step's gradient. The run goes on for a few
  // more steps, so that the last ones measured are not shortened by the end of the stream.
  std::vector<std::vector<Event>> Run(int steps) {
    const int run = steps + 2;
    std::vector<std::vector<site::ScheduleOp>> ops(stages_);
    for (int s = 0; s < stages_; ++s) {
      for (int t = 0; t < run; ++t) {
        const std::vector<site::ScheduleOp> step = site::StepOps(
            in_.schedule, stages_, s, in_.microbatches, t, 0, run - 1, in_.extra_in_flight);
        ops[s].insert(ops[s].end(), step.begin(), step.end());
      }
    }
    std::vector<size_t> next(stages_, 0);
    // Each stage runs its ops in order; an op runs once its input has arrived. A valid schedule
    // always lets some stage go on, so the loop ends.
    for (bool progressed = true; progressed;) {
      progressed = false;
      for (int s = 0; s < stages_; ++s) {
        while (next[s] < ops[s].size() && TryOp(s, ops[s][next[s]])) {
          ++next[s];
          progressed = true;
        }
      }
    }
    std::vector<std::vector<Event>> updates(steps, std::vector<Event>(stages_));
    for (int t = 0; t < steps; ++t) {
      for (int s = 0; s < stages_; ++s) updates[t][s] = update_end_.at({s, t});
    }
    return updates;
  }

 private:
  using Key = std::tuple<int, int64_t, int>;  // (kind, step, microbatch)

  const Event* Done(int s, site::ScheduleOp::Kind kind, int64_t step, int m) const {
    auto it = done_[s].find({kind, step, m});
    return it == done_[s].end() ? nullptr : &it->second;
  }

  // `from` done at stage a, its frame of `bytes` arriving at stage b.
  Event Cross(Event from, int a, int b, double bytes) const {
    const SiteLink& x = in_.links[a];
    const SiteLink& y = in_.links[b];
    const double rate = std::min(x.bytes_per_second > 0 ? x.bytes_per_second : 1e300,
                                 y.bytes_per_second > 0 ? y.bytes_per_second : 1e300);
    const double transfer = bytes / rate;
    from.time += x.one_way_delay_s + y.one_way_delay_s + transfer;
    from.delay_s += x.one_way_delay_s + y.one_way_delay_s;
    from.transfer_s += transfer;
    ++from.crossings;
    return from;
  }

  // Runs `op` on stage s if what it waits for is done; false when it must wait.
  bool TryOp(int s, const site::ScheduleOp& op) {
    using Op = site::ScheduleOp;
    Event ready = stage_free_[s];
    Event recorded;  // When its output leaves for the neighbour (an update: its relayed scale).
    switch (op.kind) {
      case Op::kForward:
        if (s > 0) {
          const Event* input = Done(s - 1, Op::kForward, op.step, op.microbatch);
          if (input == nullptr) return false;
          ready = Later(ready, Cross(*input, s - 1, s, in_.forward_frame_bytes[s - 1]));
        }
        ready.time += in_.stages[s].forward_s;
        recorded = ready;
        break;
      case Op::kBackward:
        if (s + 1 < stages_) {
          const Event* input = Done(s + 1, Op::kBackward, op.step, op.microbatch);
          if (input == nullptr) return false;
          ready = Later(ready, Cross(*input, s + 1, s, in_.backward_frame_bytes[s]));
        }
        ready.time += in_.stages[s].backward_s;
        recorded = ready;
        break;
      case Op::kClipNorm:
        // The sum of squares travels last -> first; a tiny frame.
        if (in_.clip && s + 1 < stages_) {
          const Event* sum = Done(s + 1, Op::kClipNorm, op.step, 0);
          if (sum == nullptr) return false;
          ready = Later(ready, Cross(*sum, s + 1, s, 0));
        }
        recorded = ready;
        break;
      case Op::kUpdate:
        // The scale travels first -> last, relayed by each stage before its own update.
        if (in_.clip && s > 0) {
          const Event* scale = Done(s - 1, Op::kUpdate, op.step, 0);
          if (scale == nullptr) return false;
          ready = Later(ready, Cross(*scale, s - 1, s, 0));
        }
        recorded = ready;
        ready.time += in_.stages[s].update_s;
        break;
    }
    stage_free_[s] = ready;
    done_[s][{op.kind, op.step, op.microbatch}] = recorded;
    if (op.kind == Op::kUpdate) update_end_[{s, op.step}] = ready;
    return true;
  }

  const BoundInput& in_;
  const int stages_;
  std::vector<Event> stage_free_;                        // When each stage finished its last op.
  std::vector<std::map<Key, Event>> done_;               // Per stage: each op's `recorded`.
  std::map<std::pair<int, int64_t>, Event> update_end_;  // (stage, step): its update's end.
};

}  // namespace

StepBound StepTimeLowerBound(const BoundInput& in) {
  StepBound bound;
  const int stages = static_cast<int>(in.stages.size());
  // The steady state: the step-to-step period of the slowest stage over the last steps of a long
  // run (the recurrence settles after a few steps; averaging covers periodic regimes).
  constexpr int kSteps = 24, kFrom = 12;
  const std::vector<std::vector<Event>> updates = PathSimulator(in).Run(kSteps);
  auto last = [&](int t) {
    Event e;
    for (const Event& u : updates[t]) e = Later(e, u);
    return e;
  };
  const Event a = last(kFrom - 1), b = last(kSteps - 1);
  const double n = kSteps - kFrom;
  bound.path_s = (b.time - a.time) / n;
  bound.path_delay_s = (b.delay_s - a.delay_s) / n;
  bound.path_transfer_s = (b.transfer_s - a.transfer_s) / n;
  bound.crossings = static_cast<int>((b.crossings - a.crossings) / n + 0.5);

  // Bytes each site's link carries per step, each direction.
  for (int s = 0; s < stages; ++s) {
    double up = 0, down = 0;
    if (s + 1 < stages) {
      up += in.forward_frame_bytes[s];
      down += in.backward_frame_bytes[s];
    }
    if (s > 0) {
      up += in.backward_frame_bytes[s - 1];
      down += in.forward_frame_bytes[s - 1];
    }
    const double rate = in.links[s].bytes_per_second;
    if (rate > 0) bound.bandwidth_s = std::max(bound.bandwidth_s, std::max(up, down) * in.microbatches / rate);
  }

  bound.step_s = std::max(bound.path_s, bound.bandwidth_s);
  const double compute = bound.path_s - bound.path_delay_s - bound.path_transfer_s;
  if (bound.bandwidth_s >= bound.path_s) {
    bound.limited_by = "bandwidth";
  } else if (bound.path_delay_s >= std::max(compute, bound.path_transfer_s)) {
    bound.limited_by = "latency";
  } else if (bound.path_transfer_s >= compute) {
    bound.limited_by = "transfer";
  } else {
    bound.limited_by = "compute";
  }
  return bound;
}

}  // namespace strait::bench
