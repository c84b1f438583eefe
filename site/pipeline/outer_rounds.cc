#include "site/pipeline/outer_rounds.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/pipeline/scoped_timer.h"

namespace strait::site {

OuterRounds::OuterRounds(StageFrames& frames, int64_t total_steps, ReplicaMeans& means,
                         StageExecutor& stage)
    : frames_(frames),
      total_steps_(total_steps),
      means_(means),
      stage_(stage),
      optimizer_(static_cast<float>(frames.spec().training.outer.lr),
                 static_cast<float>(frames.spec().training.outer.momentum), stage.param_count()) {}

bool OuterRounds::Used(const JobSpec& spec) {
  return spec.Replicas() > 1 && spec.training.sync == ReplicaSync::kOuter;
}

absl::Status OuterRounds::Begin() {
  if (!start_.empty()) return absl::OkStatus();
  STRAIT_ASSIGN_OR_RETURN(start_, stage_.Params());
  return absl::OkStatus();
}

absl::Status OuterRounds::MaybeRound(int64_t steps_done) {
  const JobSpec& spec = frames_.spec();
  const TrainingSpec& t = spec.training;
  if (steps_done % t.outer.every != 0 && steps_done != total_steps_) return absl::OkStatus();
  spdlog::info(
      "outer round after step {}: averaging the pseudo-gradient with the replicas of "
      "stage {}",
      steps_done, frames_.index());
  std::vector<float> delta;
  {
    ScopedTimer timer(frames_.metrics(), Timer::kCompute, Timer::kUpdate);
    STRAIT_ASSIGN_OR_RETURN(delta, stage_.Params());
    residual_.resize(delta.size(), 0.0f);
    for (size_t i = 0; i < delta.size(); ++i) delta[i] = start_[i] - delta[i] + residual_[i];
  }
  const SumFormat format =
      OuterSumFormat(t.outer.bits, t.fixed_point_bits, spec.Replicas(), last_mean_);
  std::vector<float> own;
  STRAIT_ASSIGN_OR_RETURN(std::vector<float> mean,
                          means_.Mean("outer", steps_done, delta, format, &own));
  ScopedTimer timer(frames_.metrics(), Timer::kCompute, Timer::kUpdate);
  for (size_t i = 0; i < delta.size(); ++i) residual_[i] = delta[i] - own[i];
  STRAIT_RETURN_IF_ERROR(optimizer_.Step(mean, start_));
  last_mean_ = std::move(mean);
  return stage_.SetParams(start_);
}

std::vector<float> OuterRounds::State() const {
  std::vector<float> state = optimizer_.momentum_buffer();
  state.insert(state.end(), residual_.begin(), residual_.end());
  state.resize(2 * optimizer_.momentum_buffer().size(), 0.0f);  // No residual before a round.
  state.insert(state.end(), last_mean_.begin(), last_mean_.end());
  return state;
}

absl::Status OuterRounds::SetState(std::span<const float> state) {
  const size_t n = static_cast<size_t>(stage_.param_count());
  if (state.size() != 2 * n && state.size() != 3 * n) {
    return absl::InvalidArgumentError(
        absl::StrCat("outer state of ", state.size(), " floats for a stage of ", n, " parameters"));
  }
  STRAIT_RETURN_IF_ERROR(optimizer_.SetMomentum(state.first(n)));
  residual_.assign(state.begin() + n, state.begin() + 2 * n);
  last_mean_.assign(state.begin() + 2 * n, state.end());
  return absl::OkStatus();
}

}  // namespace strait::site
