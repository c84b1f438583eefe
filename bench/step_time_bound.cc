#include "bench/step_time_bound.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <queue>
#include <tuple>
#include <utility>

#include "site/pipeline/schedule.h"

namespace strait::bench {
namespace {

// When an op (or a message) is done, and what the path that ends there is made of.
struct Event {
  double time = 0;
  double delay_s = 0, transfer_s = 0, queue_s = 0;
  int crossings = 0;
};

Event Later(const Event& a, const Event& b) { return a.time >= b.time ? a : b; }

double Rate(const SiteLink& link) {
  return link.bytes_per_second > 0 ? link.bytes_per_second : 1e300;
}

// How the links carry frames.
enum class Links {
  kFree,    // Each frame as if alone on both links (the bound).
  kQueued,  // Each link direction carries one frame at a time, first come first served.
};

class PathSimulator {
 public:
  PathSimulator(const BoundInput& in, Links links)
      : in_(in), links_(links), stages_(static_cast<int>(in.stages.size())) {
    stage_free_.resize(stages_);
    arrived_.resize(stages_);
    up_free_.assign(stages_, 0);
    down_free_.assign(stages_, 0);
  }

  // Runs `steps` steps of the schedule's op stream (site::StepOps: with 2bw the steps overlap);
  // the time every stage finished its update of each step's gradient. The run goes on for a few
  // more steps, so that the last ones measured are not shortened by the end of the stream.
  std::vector<std::vector<Event>> Run(int steps) {
    const int run = steps + 2;
    std::vector<std::vector<site::ScheduleOp>> ops(stages_);
    for (int s = 0; s < stages_; ++s) {
      for (int t = 0; t < run; ++t) {
        const std::vector<site::ScheduleOp> step =
            site::StepOps(in_.schedule, stages_, s, in_.microbatches, t, 0, run - 1,
                          in_.extra_in_flight, in_.update);
        ops[s].insert(ops[s].end(), step.begin(), step.end());
      }
    }
    std::vector<size_t> next(stages_, 0);
    // Each stage runs its ops in order; an op runs once its input has arrived. When no stage can
    // go on, the earliest frame waiting at the gateway takes its turn on its consumer's link: no
    // frame that reaches the gateway later can exist yet, since every op still to run waits for
    // one of those frames. A valid schedule always lets some stage go on, so the loop ends.
    while (true) {
      bool progressed = false;
      for (int s = 0; s < stages_; ++s) {
        while (next[s] < ops[s].size() && TryOp(s, ops[s][next[s]])) {
          ++next[s];
          progressed = true;
        }
      }
      if (progressed) continue;
      if (at_gateway_.empty()) break;
      Deliver(at_gateway_.top());
      at_gateway_.pop();
    }
    std::vector<std::vector<Event>> updates(steps, std::vector<Event>(stages_));
    for (int t = 0; t < steps; ++t) {
      for (int s = 0; s < stages_; ++s) updates[t][s] = update_end_.at({s, t});
    }
    return updates;
  }

 private:
  using Key = std::tuple<int, int64_t, int>;  // (kind of the op that sent it, step, microbatch)

  // A frame in the gateway: its first byte arrived at `first_byte`, its last at `last_byte`.
  struct Frame {
    double first_byte = 0, last_byte = 0;
    Event alone;  // When it would arrive with the links to itself.
    int to = 0;
    double bytes = 0;
    Key key;
    bool operator>(const Frame& o) const { return first_byte > o.first_byte; }
  };

  // The message of the op `key` done at stage a (`done`), `bytes` long, for stage b.
  void Send(const Event& done, int a, int b, double bytes, Key key) {
    const SiteLink& x = in_.links[a];
    const SiteLink& y = in_.links[b];
    // Alone on the links: both delays, and the bytes serialized once (streamed by the gateway).
    const double delay = x.one_way_delay_s + y.one_way_delay_s;
    const double transfer = bytes / std::min(Rate(x), Rate(y));
    Event path = done;
    path.time += delay + transfer;
    path.delay_s += delay;
    path.transfer_s += transfer;
    ++path.crossings;
    if (links_ == Links::kFree || bytes == 0) {
      arrived_[b][key] = path;
      return;
    }
    // Site a's uplink serializes its frames one after the other.
    const double start = std::max(done.time, up_free_[a]);
    up_free_[a] = start + bytes / Rate(x);
    at_gateway_.push({.first_byte = start + x.one_way_delay_s,
                      .last_byte = up_free_[a] + x.one_way_delay_s,
                      .alone = path,
                      .to = b,
                      .bytes = bytes,
                      .key = key});
  }

  // `frame` takes the consumer's downlink: it starts once its first byte is in the gateway and
  // the link is free, and cannot end before its last byte is in.
  void Deliver(const Frame& frame) {
    const SiteLink& y = in_.links[frame.to];
    const double start = std::max(frame.first_byte, down_free_[frame.to]);
    down_free_[frame.to] = std::max(start + frame.bytes / Rate(y), frame.last_byte);
    Event path = frame.alone;
    const double arrival = down_free_[frame.to] + y.one_way_delay_s;
    path.queue_s += arrival - path.time;
    path.time = arrival;
    arrived_[frame.to][frame.key] = path;
  }

  // Runs `op` on stage s if what it waits for has arrived; false when it must wait.
  bool TryOp(int s, const site::ScheduleOp& op) {
    using Op = site::ScheduleOp;
    const Key key{op.kind, op.step, op.microbatch};
    // What the op waits for from a neighbour: its input frame; with clipping, the sum of squares
    // (last -> first) and the scale (first -> last, relayed by each stage before its update).
    bool waits = false;
    switch (op.kind) {
      case Op::kForward:
        waits = s > 0;
        break;
      case Op::kBackward:
        waits = s + 1 < stages_;
        break;
      case Op::kClipNorm:
        waits = in_.clip && s + 1 < stages_;
        break;
      case Op::kUpdate:
        waits = in_.clip && s > 0;
        break;
    }
    Event ready = stage_free_[s];
    if (waits) {
      auto input = arrived_[s].find(key);
      if (input == arrived_[s].end()) return false;
      ready = Later(ready, input->second);
    }
    switch (op.kind) {
      case Op::kForward:
        ready.time += in_.stages[s].forward_s;
        if (s + 1 < stages_) Send(ready, s, s + 1, in_.forward_frame_bytes[s], key);
        break;
      case Op::kBackward:
        ready.time += in_.stages[s].backward_s;
        if (s > 0) Send(ready, s, s - 1, in_.backward_frame_bytes[s - 1], key);
        break;
      case Op::kClipNorm:
        if (in_.clip && s > 0) Send(ready, s, s - 1, 0, key);
        break;
      case Op::kUpdate:
        if (in_.clip && s + 1 < stages_) Send(ready, s, s + 1, 0, key);
        ready.time += in_.stages[s].update_s;
        update_end_[{s, op.step}] = ready;
        break;
    }
    stage_free_[s] = ready;
    return true;
  }

  const BoundInput& in_;
  const Links links_;
  const int stages_;
  std::vector<Event> stage_free_;                        // When each stage finished its last op.
  std::vector<std::map<Key, Event>> arrived_;            // Per stage: the messages that reached it.
  std::map<std::pair<int, int64_t>, Event> update_end_;  // (stage, step): its update's end.
  std::vector<double> up_free_, down_free_;  // kQueued: when each site's link is free, each way.
  std::priority_queue<Frame, std::vector<Frame>, std::greater<>> at_gateway_;  // kQueued.
};

// The step-to-step period in the steady state: that of the slowest stage over the last steps of a
// long run (the recurrence settles after a few steps; averaging covers periodic regimes), and what
// the path of that period is made of.
Event SteadyPeriod(const BoundInput& in, Links links) {
  constexpr int kSteps = 48, kFrom = 24;
  const std::vector<std::vector<Event>> updates = PathSimulator(in, links).Run(kSteps);
  auto last = [&](int t) {
    Event e;
    for (const Event& u : updates[t]) e = Later(e, u);
    return e;
  };
  const Event a = last(kFrom - 1), b = last(kSteps - 1);
  const double n = kSteps - kFrom;
  return {.time = (b.time - a.time) / n,
          .delay_s = (b.delay_s - a.delay_s) / n,
          .transfer_s = (b.transfer_s - a.transfer_s) / n,
          .queue_s = (b.queue_s - a.queue_s) / n,
          .crossings = static_cast<int>((b.crossings - a.crossings) / n + 0.5)};
}

}  // namespace

StepBound StepTimeLowerBound(const BoundInput& in) {
  StepBound bound;
  const int stages = static_cast<int>(in.stages.size());
  const Event path = SteadyPeriod(in, Links::kFree);
  bound.path_s = path.time;
  bound.path_delay_s = path.delay_s;
  bound.path_transfer_s = path.transfer_s;
  bound.crossings = path.crossings;
  const Event queued = SteadyPeriod(in, Links::kQueued);
  bound.queued_s = queued.time;
  bound.queued_wait_s = queued.queue_s;

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
