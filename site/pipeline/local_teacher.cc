#include "site/pipeline/local_teacher.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/nn/checkpoint.h"
#include "site/nn/checkpoint_layers.h"
#include "site/nn/stage.h"

namespace strait::site {

absl::StatusOr<std::unique_ptr<StageExecutor>> LoadTeacherStage(const JobSpec& spec,
                                                                LayerRange layers, int max_batch,
                                                                const StageWorkers& workers) {
  if (!spec.has_teacher) return absl::FailedPreconditionError("the job has no teacher");
  const TeacherSpec& teacher = spec.teacher;
  const std::string& path = teacher.checkpoint;
  absl::StatusOr<CheckpointState> file = ReadCheckpoint(path);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("teacher.checkpoint: ", file.status().message()));
  }
  const LayerRange held{static_cast<int>(file->first_layer), static_cast<int>(file->end_layer)};
  if (file->fingerprint != StageFingerprint(teacher.model, held)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "teacher.checkpoint ", path, " holds layers [", held.start, ", ", held.end,
        ") of another model than teacher.model (fingerprint ", file->fingerprint,
        "): give the checkpoint the teacher was trained to, with teacher.model as it trained"));
  }
  absl::StatusOr<CheckpointState> part = CutLayers(*file, teacher.model, layers);
  if (!part.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("teacher.checkpoint ", path, ": layers [",
                                                      layers.start, ", ", layers.end,
                                                      "): ", part.status().message()));
  }
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<StageExecutor> stage,
                          StageExecutor::Create(teacher.model, layers, spec.training.optimizer,
                                                max_batch, WeightVersioning{}, workers));
  STRAIT_RETURN_IF_ERROR(stage->RestoreWeights(part->step, part->params, {}, {}));
  return stage;
}

absl::Status LocalTeacher::Forward(int64_t step, int n, const float* input, float* output) {
  const absl::Status s = stage_.Forward(step, 0, n, input, output, {.training = false});
  stage_.Discard(0);
  return s;
}

absl::StatusOr<TeacherTargets> LocalTeacher::Targets(int64_t step, int n, const float* input) {
  if (!is_last()) return absl::FailedPreconditionError("teacher targets on a middle stage");
  logits_.resize(static_cast<size_t>(n) * output_features());
  STRAIT_RETURN_IF_ERROR(Forward(step, n, input, logits_.data()));
  const ModelSpec& model = spec_.teacher.model;
  return TopKTargets(logits_, int64_t{n} * model.TargetsPerSample(), model.Classes(),
                     spec_.training.distill.temperature, spec_.teacher.top_k);
}

}  // namespace strait::site
