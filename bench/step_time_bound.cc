#include "bench/step_time_bound.h"

#include <algorithm>
#include <cstddef>

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
  explicit PathSimulator(const BoundInput& in) : in_(in), stages_(static_cast<int>(in.stages.size())) {
    for (int s = 0; s < stages_; ++s) {
      ops_.push_back(site::StageSchedule(in.schedule, stages_, s, in.microbatches));
    }
    stage_free_.resize(stages_);
  }

  // Runs `steps` steps; the time every stage finished its update, per step.
  std::vector<std::vector<Event>> Run(int steps) {
    std::vector<std::vector<Event>> updates;
    for (int t = 0; t < steps; ++t) updates.push_back(Step());
    return updates;
  }

 private:
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

  std::vector<Event> Step() {
    const int m_count = in_.microbatches;
    std::vector<std::vector<Event>> forward(stages_, std::vector<Event>(m_count));
    std::vector<std::vector<Event>> backward(stages_, std::vector<Event>(m_count));
    std::vector<std::vector<bool>> fdone(stages_, std::vector<bool>(m_count, false));
    std::vector<std::vector<bool>> bdone(stages_, std::vector<bool>(m_count, false));
    std::vector<size_t> next(stages_, 0);
    // Each stage runs its ops in schedule order; an op runs once its input has arrived. A valid
    // schedule always lets some stage go on, so the loop ends.
    for (bool progressed = true; progressed;) {
      progressed = false;
      for (int s = 0; s < stages_; ++s) {
        while (next[s] < ops_[s].size()) {
          const site::ScheduleOp& op = ops_[s][next[s]];
          const int m = op.microbatch;
          Event ready = stage_free_[s];
          if (op.kind == site::ScheduleOp::kForward) {
            if (s > 0) {
              if (!fdone[s - 1][m]) break;
              ready = Later(ready, Cross(forward[s - 1][m], s - 1, s, in_.forward_frame_bytes[s - 1]));
            }
            ready.time += in_.stages[s].forward_s;
            forward[s][m] = ready;
            fdone[s][m] = true;
          } else {
            if (s + 1 < stages_) {
              if (!bdone[s + 1][m]) break;
              ready = Later(ready, Cross(backward[s + 1][m], s + 1, s, in_.backward_frame_bytes[s]));
            }
            ready.time += in_.stages[s].backward_s;
            backward[s][m] = ready;
            bdone[s][m] = true;
          }
          stage_free_[s] = ready;
          ++next[s];
          progressed = true;
        }
      }
    }
    // Clipping: the sum of squares travels last -> first, the scale first -> last; tiny frames.
    std::vector<Event> update(stages_);
    if (in_.clip) {
      std::vector<Event> norm(stages_);
      for (int s = stages_ - 1; s >= 0; --s) {
        norm[s] = s + 1 < stages_ ? Later(stage_free_[s], Cross(norm[s + 1], s + 1, s, 0)) : stage_free_[s];
      }
      Event scale = norm[0];
      for (int s = 0; s < stages_; ++s) {
        if (s > 0) scale = Later(norm[s], Cross(scale, s - 1, s, 0));
        update[s] = scale;
      }
    } else {
      update = stage_free_;
    }
    for (int s = 0; s < stages_; ++s) {
      update[s].time += in_.stages[s].update_s;
      stage_free_[s] = update[s];
    }
    return update;
  }

  const BoundInput& in_;
  const int stages_;
  std::vector<std::vector<site::ScheduleOp>> ops_;
  std::vector<Event> stage_free_;  // When each stage finished its last op.
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
