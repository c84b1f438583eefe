#include "site/pipeline/outer_rounds.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/pipeline/scoped_timer.h"

namespace strait::site {

OuterRounds::OuterRounds(StageFrames& frames, int64_t total_steps, ReplicaMeans& means,
                         StageExecutor& stage)
    : frames_(frames),
      total_steps_(total_steps),
      every_(frames.spec().training.outer.every),
      fragments_(frames.spec().training.outer.fragments),
      delay_(frames.spec().training.outer.delay),
      n_(static_cast<size_t>(stage.param_count())),
      means_(means),
      stage_(stage),
      optimizer_(static_cast<float>(frames.spec().training.outer.lr),
                 static_cast<float>(frames.spec().training.outer.momentum), stage.param_count()) {
  state_.residual.assign(n_, 0.0f);
  state_.last_mean.assign(n_, 0.0f);
  state_.synced.assign(fragments_, 0);
  // A stage of fewer blocks than fragments has empty ones: nothing to send, nothing to learn.
  for (int p = 0; p < fragments_; ++p) {
    if (RangeOf(p).size() == 0) state_.synced[p] = 1;
  }
}

bool OuterRounds::Used(const JobSpec& spec) {
  return spec.Replicas() > 1 && spec.training.sync == ReplicaSync::kOuter;
}

ValueRange OuterRounds::RangeOf(int fragment) const {
  return fragment < 0 ? ValueRange{0, n_} : FragmentRange(n_, fragments_, fragment);
}

// The scales come from the values' last round's mean, which every replica holds; a fragment's
// first round (and a last round over fragments of which one has had none) is 32-bit fixed point.
SumFormat OuterRounds::FormatOf(int fragment, ValueRange range) const {
  const TrainingSpec& t = frames_.spec().training;
  const bool known = fragment < 0 ? std::all_of(state_.synced.begin(), state_.synced.end(),
                                                [](uint8_t s) { return s != 0; })
                                  : state_.synced[fragment] != 0;
  const std::span<const float> last =
      known ? std::span(state_.last_mean).subspan(range.begin, range.size())
            : std::span<const float>();
  return OuterSumFormat(t.outer.bits, t.fixed_point_bits, frames_.spec().Replicas(), last);
}

absl::Status OuterRounds::Begin() {
  if (begun_) return absl::OkStatus();
  begun_ = true;
  if (state_.start.empty()) {
    STRAIT_ASSIGN_OR_RETURN(state_.start, stage_.Params());
  }
  // Rounds a checkpoint held in flight: the same values again, under this generation's masks.
  for (InFlight& flight : in_flight_) {
    const ValueRange range = RangeOf(flight.round.fragment);
    STRAIT_ASSIGN_OR_RETURN(flight.sum,
                            means_.Start("outer", flight.round.sent_at, flight.round.sent,
                                         FormatOf(flight.round.fragment, range)));
  }
  return absl::OkStatus();
}

absl::Status OuterRounds::AfterUpdate(int64_t steps_done) {
  const bool last = steps_done == total_steps_;
  for (auto it = in_flight_.begin(); it != in_flight_.end();) {
    if (!last && it->round.sent_at + delay_ > steps_done) {
      ++it;
      continue;
    }
    STRAIT_RETURN_IF_ERROR(Land(*it, steps_done));
    it = in_flight_.erase(it);
  }
  if (last) {
    STRAIT_RETURN_IF_ERROR(Open(-1, steps_done));
  } else if (std::optional<int> due = FragmentDue(steps_done, every_, fragments_);
             due && RangeOf(*due).size() > 0) {
    STRAIT_RETURN_IF_ERROR(Open(*due, steps_done));
  } else {
    return absl::OkStatus();
  }
  if (!last && delay_ > 0) return absl::OkStatus();
  STRAIT_RETURN_IF_ERROR(Land(in_flight_.back(), steps_done));
  in_flight_.pop_back();
  return absl::OkStatus();
}

absl::Status OuterRounds::Open(int fragment, int64_t steps_done) {
  const ValueRange range = RangeOf(fragment);
  spdlog::info("outer round after step {}: stage {}'s values [{}, {}) to its replicas' mean",
               steps_done, frames_.index(), range.begin, range.end);
  InFlight flight{.round = {.sent_at = steps_done, .fragment = fragment}};
  {
    ScopedTimer timer(frames_.metrics(), Timer::kCompute, Timer::kUpdate);
    STRAIT_ASSIGN_OR_RETURN(std::vector<float> params, stage_.Params());
    flight.round.local_at_send.assign(params.begin() + range.begin, params.begin() + range.end);
    flight.round.sent.resize(range.size());
    for (size_t j = 0; j < range.size(); ++j) {
      const size_t i = range.begin + j;
      flight.round.sent[j] = state_.start[i] - params[i] + state_.residual[i];
    }
  }
  std::vector<float> own;
  STRAIT_ASSIGN_OR_RETURN(flight.sum, means_.Start("outer", steps_done, flight.round.sent,
                                                   FormatOf(fragment, range), &own));
  for (size_t j = 0; j < range.size(); ++j) {
    state_.residual[range.begin + j] = flight.round.sent[j] - own[j];
  }
  in_flight_.push_back(std::move(flight));
  return absl::OkStatus();
}

absl::Status OuterRounds::Land(InFlight& flight, int64_t steps_done) {
  const auto waited_from = std::chrono::steady_clock::now();
  STRAIT_ASSIGN_OR_RETURN(std::vector<float> mean, means_.Finish(flight.sum));
  const auto landed = std::chrono::steady_clock::now();
  frames_.metrics().AddOuterRound(
      {.round_s = std::chrono::duration<double>(landed - flight.sum.sent).count(),
       .exposed_s = std::chrono::duration<double>(landed - waited_from).count(),
       .bytes = MaskedCount(flight.sum.count, flight.sum.format.bits) * flight.sum.format.bits / 8,
       .dense_bytes = 4 * n_,
       .last = flight.round.fragment < 0});
  ScopedTimer timer(frames_.metrics(), Timer::kCompute, Timer::kUpdate);
  const ValueRange range = RangeOf(flight.round.fragment);
  std::span<float> start = std::span(state_.start).subspan(range.begin, range.size());
  STRAIT_RETURN_IF_ERROR(optimizer_.StepAt(range.begin, mean, start));
  std::copy(mean.begin(), mean.end(), state_.last_mean.begin() + range.begin);
  if (flight.round.fragment < 0) {
    std::fill(state_.synced.begin(), state_.synced.end(), 1);
  } else {
    state_.synced[flight.round.fragment] = 1;
  }
  STRAIT_ASSIGN_OR_RETURN(std::vector<float> params, stage_.Params());
  const bool moved = steps_done != flight.round.sent_at;
  for (size_t j = 0; j < range.size(); ++j) {
    float& p = params[range.begin + j];
    // Unmoved: exactly the round's result, so the replicas agree bit for bit.
    p = moved ? p + (start[j] - flight.round.local_at_send[j]) : start[j];
  }
  return stage_.SetParams(params);
}

std::vector<float> OuterRounds::State() const {
  OuterState state = state_;
  state.momentum = optimizer_.momentum_buffer();
  for (const InFlight& flight : in_flight_) state.pending.push_back(flight.round);
  return SerializeOuterState(state);
}

absl::Status OuterRounds::SetState(std::span<const float> data) {
  STRAIT_ASSIGN_OR_RETURN(OuterState state,
                          ParseOuterState(data, static_cast<int64_t>(n_), fragments_));
  STRAIT_RETURN_IF_ERROR(optimizer_.SetMomentum(state.momentum));
  in_flight_.clear();
  for (PendingRound& round : state.pending) in_flight_.push_back({.round = std::move(round)});
  state.pending.clear();
  state.momentum.clear();
  state_ = std::move(state);
  begun_ = false;
  return absl::OkStatus();
}

}  // namespace strait::site
