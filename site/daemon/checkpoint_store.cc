#include "site/daemon/checkpoint_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "site/nn/checkpoint.h"
#include "site/nn/stage.h"
#include "site/pipeline/stage_checkpoint.h"

namespace strait::site {
namespace {

// "step-<N>.ckpt", N of at least eight digits.
std::string FileNameFor(int64_t step) { return absl::StrFormat("step-%08d.ckpt", step); }

}  // namespace

CheckpointStore::CheckpointStore(const JobSpec& spec, const std::string& site_id, Env& env)
    : spec_(spec),
      env_(env),
      dir_(spec.training.checkpoint.dir + "/" + site_id),
      keep_(std::max(2, spec.training.checkpoint.keep)) {}

std::string CheckpointStore::PathFor(int64_t step) const {
  return absl::StrCat(dir_, "/", FileNameFor(step));
}

bool CheckpointStore::Due(int64_t step) const {
  const int64_t every = spec_.training.checkpoint.every;
  return every > 0 && step > 0 && step % every == 0;
}

absl::Status CheckpointStore::Save(int64_t step, const StageExecutor& stage,
                                   const std::vector<float>* outer_state) {
  // Env::WriteFileAtomically makes the directory.
  if (outer_state != nullptr) {
    // The same file format (checksum, atomic rename), the state in place of the parameters.
    CheckpointState outer{.step = step,
                          .fingerprint = stage.Fingerprint(),
                          .init_seed = spec_.model.init_seed,
                          .data_seed = spec_.data.seed,
                          .params = *outer_state};
    STRAIT_RETURN_IF_ERROR(WriteCheckpoint(PathFor(step) + ".outer", outer, &env_));
  }
  STRAIT_RETURN_IF_ERROR(SaveStageCheckpoint(PathFor(step), spec_, stage, step, &env_));
  std::vector<int64_t> steps = Steps();
  for (size_t i = 0; i + keep_ < steps.size(); ++i) {
    // With the checkpoint it trained before layers moved (site/daemon/layer_moves.h), if any.
    // And its outer optimizer's momentum (replicas with sync: outer), if any.
    for (const std::string& path :
         {PathFor(steps[i]), PathFor(steps[i]) + ".moved", PathFor(steps[i]) + ".outer"}) {
      if (absl::Status removed = env_.RemoveFile(path); !removed.ok()) {
        spdlog::warn("cannot remove old checkpoint {}: {}", path, std::string(removed.message()));
      }
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> CheckpointStore::Steps() const {
  std::vector<int64_t> steps;
  absl::StatusOr<std::vector<std::string>> names = env_.ListFiles(dir_);
  if (!names.ok()) {
    spdlog::warn("cannot list checkpoints: {}", std::string(names.status().message()));
    return steps;
  }
  for (const std::string& name : *names) {
    long long step = 0;
    char tail = 0;
    // Exactly step-<digits>.ckpt; temporaries of an interrupted write have another suffix.
    if (std::sscanf(name.c_str(), "step-%lld.ckp%c", &step, &tail) == 2 && tail == 't' &&
        name == FileNameFor(step)) {
      steps.push_back(step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

absl::StatusOr<int64_t> CheckpointStore::NewestValid(const StageExecutor& stage) const {
  std::vector<int64_t> steps = Steps();
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    absl::StatusOr<CheckpointState> state = ReadCheckpoint(PathFor(*it), &env_);
    absl::Status problem = state.status();
    // A planned split's checkpoint may hold other layers than the stage: they move at the rollback
    // (site/daemon/layer_moves.h).
    const uint64_t fingerprint =
        state.ok() && spec_.SplitMayMove()
            ? StageFingerprint(spec_.model, {state->first_layer, state->end_layer})
            : stage.Fingerprint();
    if (state.ok() &&
        (state->fingerprint != fingerprint || state->step != *it ||
         state->data_seed != spec_.data.seed || state->init_seed != spec_.model.init_seed)) {
      problem = absl::FailedPreconditionError("it belongs to another job, split or step");
    } else if (state.ok() && static_cast<int>(state->weight_versions) != stage.weight_versions()) {
      problem = absl::FailedPreconditionError(
          "it was written with another schedule (2bw keeps two weight versions, 1f1b and gpipe "
          "one)");
    }
    if (problem.ok()) return *it;
    spdlog::warn("refusing checkpoint {}: {}; trying the one before", PathFor(*it),
                 std::string(problem.message()));
  }
  return absl::NotFoundError(absl::StrCat("no usable checkpoint in ", dir_));
}

absl::Status CheckpointStore::Load(int64_t step, StageExecutor& stage) const {
  absl::StatusOr<int64_t> loaded = LoadStageCheckpoint(PathFor(step), spec_, stage, &env_);
  if (!loaded.ok()) {
    return absl::Status(loaded.status().code(), absl::StrCat("cannot roll back to step ", step,
                                                             ": ", loaded.status().message()));
  }
  if (*loaded != step) {
    return absl::DataLossError(
        absl::StrCat(PathFor(step), " holds step ", *loaded, ", not ", step));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> CheckpointStore::LoadOuterState(int64_t step) const {
  const std::string path = PathFor(step) + ".outer";
  absl::StatusOr<CheckpointState> state = ReadCheckpoint(path, &env_);
  if (!state.ok()) return state.status();
  if (state->step != step) {
    return absl::DataLossError(absl::StrCat(path, " holds step ", state->step, ", not ", step));
  }
  return std::move(state->params);
}

}  // namespace strait::site
