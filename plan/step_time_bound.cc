#include "plan/step_time_bound.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <tuple>
#include <utility>

#include "core/schedule.h"

namespace strait::plan {
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

// A message from stage a to stage b alone on the links: both one-way delays (site -> gateway ->
// site), and its bytes serialized once at the slower rate (the gateway streams).
struct Crossing {
  double delay_s, transfer_s;
};
Crossing CrossingOf(const BoundInput& in, int a, int b, double bytes) {
  const SiteLink& x = in.links[a];
  const SiteLink& y = in.links[b];
  return {x.one_way_delay_s + y.one_way_delay_s, bytes / std::min(Rate(x), Rate(y))};
}

// Stage s's place in the pipeline and the schedule's knobs, as StepOps takes them.
StageStepping Stepping(const BoundInput& in, int s) {
  return {in.schedule, static_cast<int>(in.stages.size()), s, in.microbatches, in.extra_in_flight,
          in.update};
}

// The message an op of stage s waits for from a neighbour: its input frame; with clipping, the sum
// of squares (last -> first, 0 bytes) and the scale (first -> last, relayed by each stage before
// its update). Nothing for the first forward, the last backward and, without clipping, the rest.
struct Input {
  int from;
  double bytes;
};
std::optional<Input> InputOf(const BoundInput& in, int s, const ScheduleOp& op) {
  using Op = ScheduleOp;
  const int stages = static_cast<int>(in.stages.size());
  switch (op.kind) {
    case Op::kForward:
      if (s > 0) return Input{s - 1, in.forward_frame_bytes[s - 1]};
      break;
    case Op::kBackward:
      if (s + 1 < stages) return Input{s + 1, in.backward_frame_bytes[s]};
      break;
    case Op::kClipNorm:
      if (in.clip && s + 1 < stages) return Input{s + 1, 0};
      break;
    case Op::kUpdate:
      if (in.clip && s > 0) return Input{s - 1, 0};
      break;
  }
  return std::nullopt;
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

  // Runs `steps` steps of the schedule's op stream (StepOps: with 2bw the steps overlap);
  // the time every stage finished its update of each step's gradient. The run goes on for a few
  // more steps, so that the last ones measured are not shortened by the end of the stream.
  std::vector<std::vector<Event>> Run(int steps) {
    const int run = steps + 2;
    std::vector<std::vector<ScheduleOp>> ops(stages_);
    for (int s = 0; s < stages_; ++s) {
      for (int t = 0; t < run; ++t) {
        const std::vector<ScheduleOp> step = StepOps(Stepping(in_, s), t, {0, run - 1});
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
    const Crossing crossing = CrossingOf(in_, a, b, bytes);
    Event path = done;
    path.time += crossing.delay_s + crossing.transfer_s;
    path.delay_s += crossing.delay_s;
    path.transfer_s += crossing.transfer_s;
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
  bool TryOp(int s, const ScheduleOp& op) {
    using Op = ScheduleOp;
    const Key key{op.kind, op.step, op.microbatch};
    const bool waits = InputOf(in_, s, op).has_value();
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

// The busiest link of a flushed schedule (1f1b, gpipe), with the latency it cannot overlap: every
// frame of step t exists after stage 0 finished its update of step t - 1 (all of the step's work
// follows stage 0's first forward) and comes before the end of stage 0's update of step t (every
// frame leads to one of stage 0's backward passes). So a link direction carries its bytes of the
// step between the earliest moment any of its frames can start, `head`, and the latest moment
// from which the rest of the step still fits, `tail` before the step's end:
// period >= head + bytes / rate + tail. Head and tail are longest paths in the one-step dependency
// graph (ops and crossings as in the path, each frame alone on its links); a stage's ops of the
// previous step are left out, which can only shorten them. With 2bw the steps overlap, and only
// the bytes over the rate remain.
class FlushedStep {
 public:
  explicit FlushedStep(const BoundInput& in)
      : in_(in), stages_(static_cast<int>(in.stages.size())) {
    for (int s = 0; s < stages_; ++s) {
      for (const ScheduleOp& op : StepOps(Stepping(in, s), 0, {0, 0})) {
        index_[{s, op.kind, op.microbatch}] = static_cast<int>(nodes_.size());
        nodes_.push_back({s, op, Duration(s, op)});
      }
    }
    out_.resize(nodes_.size());
    for (int v = 0; v < static_cast<int>(nodes_.size()); ++v) {
      if (v > 0 && nodes_[v - 1].stage == nodes_[v].stage) {
        out_[v - 1].push_back({v, nodes_[v - 1].duration, -1, 0});
      }
      AddInput(v);
    }
    Order();
  }

  double LinkBound() const {
    // Earliest start of each op after the step starts, and the longest path from its start to the
    // end of stage 0's update.
    const int n = static_cast<int>(nodes_.size());
    constexpr double kNever = -1e300;
    std::vector<double> earliest(n, kNever), rest(n, kNever);
    earliest[0] = 0;  // Stage 0's first forward, which every op of the step follows.
    for (int u : order_) {
      if (earliest[u] == kNever) continue;
      for (const Edge& e : out_[u]) {
        earliest[e.to] = std::max(earliest[e.to], earliest[u] + e.weight);
      }
    }
    const int last = index_.at({0, ScheduleOp::kUpdate, 0});
    rest[last] = nodes_[last].duration;
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      for (const Edge& e : out_[*it]) {
        if (rest[e.to] != kNever) rest[*it] = std::max(rest[*it], e.weight + rest[e.to]);
      }
    }
    struct Direction {
      double bytes = 0, head = 1e300, tail = 1e300;
    };
    std::vector<Direction> up(stages_), down(stages_);
    for (int u = 0; u < n; ++u) {
      for (const Edge& e : out_[u]) {
        const bool counted = e.from_stage >= 0 && e.bytes > 0;  // A frame, not a 0-byte message.
        if (!counted || earliest[u] == kNever || rest[e.to] == kNever) continue;
        const int a = e.from_stage, b = nodes_[e.to].stage;
        const double sent = earliest[u] + nodes_[u].duration;
        const double da = in_.links[a].one_way_delay_s, db = in_.links[b].one_way_delay_s;
        up[a].bytes += e.bytes;
        up[a].head = std::min(up[a].head, sent);
        up[a].tail = std::min(up[a].tail, da + db + rest[e.to]);
        down[b].bytes += e.bytes;
        down[b].head = std::min(down[b].head, sent + da);
        down[b].tail = std::min(down[b].tail, db + rest[e.to]);
      }
    }
    double bound = 0;
    for (int s = 0; s < stages_; ++s) {
      if (in_.links[s].bytes_per_second <= 0) continue;
      for (const Direction& d : {up[s], down[s]}) {
        if (d.bytes <= 0) continue;
        bound = std::max(bound, d.head + d.bytes / in_.links[s].bytes_per_second + d.tail);
      }
    }
    return bound;
  }

 private:
  struct Node {
    int stage;
    ScheduleOp op;
    double duration;
  };
  // `to` starts at least `weight` after `from` starts; a crossing from `from_stage` (-1: the same
  // stage) carrying `bytes`.
  struct Edge {
    int to;
    double weight;
    int from_stage;
    double bytes;
  };

  double Duration(int s, const ScheduleOp& op) const {
    switch (op.kind) {
      case ScheduleOp::kForward:
        return in_.stages[s].forward_s;
      case ScheduleOp::kBackward:
        return in_.stages[s].backward_s;
      case ScheduleOp::kClipNorm:
        return 0;
      case ScheduleOp::kUpdate:
        return in_.stages[s].update_s;
    }
    return 0;
  }

  // The edge from the op that sends v's input (InputOf; the scale leaves at its sender's update's
  // start, the rest at their sender's end).
  void AddInput(int v) {
    const int s = nodes_[v].stage;
    const ScheduleOp& op = nodes_[v].op;
    const std::optional<Input> input = InputOf(in_, s, op);
    if (!input) return;
    const int u = index_.at({input->from, op.kind, op.microbatch});
    const Crossing crossing = CrossingOf(in_, input->from, s, input->bytes);
    const double leaves = op.kind == ScheduleOp::kUpdate ? 0 : nodes_[u].duration;
    out_[u].push_back(
        {v, leaves + crossing.delay_s + crossing.transfer_s, input->from, input->bytes});
  }

  // Topological order (Kahn).
  void Order() {
    const int n = static_cast<int>(nodes_.size());
    std::vector<int> inputs(n, 0);
    for (int u = 0; u < n; ++u) {
      for (const Edge& e : out_[u]) ++inputs[e.to];
    }
    std::vector<int> ready;
    for (int u = 0; u < n; ++u) {
      if (inputs[u] == 0) ready.push_back(u);
    }
    while (!ready.empty()) {
      const int u = ready.back();
      ready.pop_back();
      order_.push_back(u);
      for (const Edge& e : out_[u]) {
        if (--inputs[e.to] == 0) ready.push_back(e.to);
      }
    }
  }

  const BoundInput& in_;
  const int stages_;
  std::vector<Node> nodes_;
  std::vector<std::vector<Edge>> out_;
  std::map<std::tuple<int, int, int>, int> index_;  // (stage, kind, microbatch) -> node
  std::vector<int> order_;
};

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
    if (rate > 0)
      bound.bandwidth_s = std::max(bound.bandwidth_s, std::max(up, down) * in.microbatches / rate);
  }

  bound.link_s = in.schedule == Schedule::k2BW
                     ? bound.bandwidth_s
                     : std::max(bound.bandwidth_s, FlushedStep(in).LinkBound());
  bound.step_s = std::max(bound.path_s, bound.link_s);
  const double compute = bound.path_s - bound.path_delay_s - bound.path_transfer_s;
  if (bound.link_s >= bound.path_s) {
    bound.limited_by = bound.link_s > bound.bandwidth_s ? "link" : "bandwidth";
  } else if (bound.path_delay_s >= std::max(compute, bound.path_transfer_s)) {
    bound.limited_by = "latency";
  } else if (bound.path_transfer_s >= compute) {
    bound.limited_by = "transfer";
  } else {
    bound.limited_by = "compute";
  }
  return bound;
}

}  // namespace strait::plan
