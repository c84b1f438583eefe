#include "site/pipeline/local_state.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {

absl::StatusOr<std::vector<float>> LocalState::Read(ShardedState which, int64_t step) const {
  return workers_.FromWorker0<std::vector<float>>(
      [which, step](const Worker& w) -> absl::StatusOr<std::vector<float>> {
        switch (which) {
          case ShardedState::kParams:
            return w.history->Newest();
          case ShardedState::kPrevious:
            return w.history->Previous();
          case ShardedState::kLookahead:
            return w.history->Lookahead();
          case ShardedState::kGrads:
            return w.history->Grads(step);
          case ShardedState::kOptimizer:
            break;
        }
        std::vector<float> out(w.optimizer->state_floats());
        w.backend->CopyToHost(out.data(), w.optimizer->state(), sizeof(float) * out.size());
        STRAIT_RETURN_IF_ERROR(w.backend->Sync());
        return out;
      });
}

absl::Status LocalState::SetParams(absl::Span<const float> params) {
  return workers_.OnWorkers([&](int w) { return workers_.at(w).history->SetNewest(params); });
}

absl::Status LocalState::RestoreWeights(int64_t version, absl::Span<const float> newest,
                                        absl::Span<const float> previous,
                                        absl::Span<const float> lookahead) {
  return workers_.OnWorkers(
      [&](int w) { return workers_.at(w).history->Restore(version, newest, previous, lookahead); });
}

absl::Status LocalState::SetOptimizerState(absl::Span<const float> state) {
  return workers_.OnWorkers([&](int w) -> absl::Status {
    const Worker& worker = workers_.at(w);
    if (static_cast<int64_t>(state.size()) != worker.optimizer->state_floats()) {
      return absl::InvalidArgumentError(absl::StrCat("SetOptimizerState: ", state.size(),
                                                     " floats for an optimizer state of ",
                                                     worker.optimizer->state_floats()));
    }
    worker.backend->CopyToDevice(worker.optimizer->state(), state.data(),
                                 sizeof(float) * state.size());
    return worker.backend->Sync();
  });
}

absl::Status LocalState::SetGrads(int64_t step, absl::Span<const float> grads) {
  const int64_t params = workers_.at(0).stage->param_count();
  if (static_cast<int64_t>(grads.size()) != params) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetGrads: ", grads.size(), " floats for a stage of ", params));
  }
  return workers_.OnWorkers([&](int w) -> absl::Status {
    Worker& worker = workers_.at(w);
    worker.backend->CopyToDevice(worker.history->grads(step), grads.data(),
                                 sizeof(float) * grads.size());
    return worker.backend->Sync();
  });
}

}  // namespace strait::site
