// A teacher of knowledge sharing (docs/distillation.md) in this process: layers of the job's
// teacher model loaded from teacher.checkpoint, run forward only (no dropout, no gradients). The
// stage that holds the teacher's last layer turns its logits into the top-k targets the student
// learns from. `strait train` runs the whole teacher here; a teacher site runs its layers.
// Not thread-safe: one thread drives it.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/nn/teacher_targets.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {

// The terms of the student's loss that training.distill gives.
inline DistillTerms DistillTermsOf(const DistillSpec& d) {
  return {static_cast<float>(d.alpha), static_cast<float>(d.temperature)};
}

// Layers `layers` of spec.teacher.model for microbatches of up to `max_batch` samples, on
// `workers`, with the weights of spec.teacher.checkpoint (a checkpoint of the teacher model that
// holds those layers: FAILED_PRECONDITION naming the file otherwise). Blocks on disk I/O.
absl::StatusOr<std::unique_ptr<StageExecutor>> LoadTeacherStage(const JobSpec& spec,
                                                                LayerRange layers, int max_batch,
                                                                const StageWorkers& workers);

class LocalTeacher {
 public:
  // `stage`: from LoadTeacherStage; `spec` and `stage` must outlive this.
  LocalTeacher(const JobSpec& spec, StageExecutor& stage) : spec_(spec), stage_(stage) {}

  int64_t input_features() const { return stage_.input_features(); }
  int64_t output_features() const { return stage_.output_features(); }
  bool is_first() const { return stage_.is_first(); }
  bool is_last() const { return stage_.is_last(); }

  // input [n, input_features()] -> output [n, output_features()] (host).
  absl::Status Forward(int64_t step, int n, const float* input, float* output);

  // The last teacher stage: the targets of a microbatch of n samples whose input (the last
  // stage's) is `input`: top spec.teacher.top_k at training.distill.temperature, one row per
  // target, as computed (what crosses the wire is their encoding: teacher_targets_codec.h).
  absl::StatusOr<TeacherTargets> Targets(int64_t step, int n, const float* input);

 private:
  const JobSpec& spec_;
  StageExecutor& stage_;
  std::vector<float> logits_;
};

}  // namespace strait::site
