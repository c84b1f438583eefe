// One teacher site's part of knowledge sharing in a federation (docs/distillation.md): teacher
// stage `t` of the job's teacher runs forward only, step after step, on the student's batches: the
// first teacher stage reads them from its own copy of the data with the shared seeded sampler, a
// later one takes the teacher's residual stream from the stage before (TEACH frames); the last one
// turns its logits into the top-k targets (teacher_targets_codec.h) and sends them to the student's
// last stage. Nothing it sends carries a weight. It never waits for the student: it runs ahead as
// far as its senders' windows and the gateway's memory budget let it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/job_spec.h"
#include "site/data/sampler.h"
#include "site/pipeline/generation_runner.h"
#include "site/pipeline/local_teacher.h"
#include "site/pipeline/stage_frames.h"

namespace strait::site {

class TeacherRunner : public GenerationRunner {
 public:
  // Teacher stage `teacher_stage` of `spec` with `stage` (its layers of the teacher, weights from
  // teacher.checkpoint: LoadTeacherStage) and io.links (forward_in from the teacher stage before,
  // forward_out to the next or to the student's last stage); io.data.train is set on the first
  // teacher stage (replica 0: a job with a teacher has one pipeline). `spec`, `stage` and
  // `metrics` must outlive the runner.
  TeacherRunner(const JobSpec& spec, int teacher_stage, StageExecutor& stage, StageIo io,
                SiteMetrics& metrics, StepRange steps);

  int64_t step() const override { return step_; }
  int64_t updates() const override { return step_; }  // Nothing to update: any step resumes.
  // The forwards of every microbatch of the next step, and their frames sent.
  absl::StatusOr<StepResult> Step(bool then_evaluate) override;
  // Evaluations are the student's alone: nothing to do.
  absl::StatusOr<std::optional<Evaluation>> Evaluate() override { return std::nullopt; }
  std::optional<std::vector<float>> OuterState() const override { return std::nullopt; }
  absl::Status Flush() override { return frames_.Flush(); }
  void Abort(const absl::Status& status) override { frames_.Abort(status); }

 private:
  v1::TensorKey Key(int64_t step, int microbatch, int from_stage) const {
    return frames_.Key(step, microbatch, from_stage, v1::FORWARD, v1::TEACH);
  }
  absl::Status RunForward(int64_t step, int microbatch);
  // The first teacher stage: announces the paces up to step `through`, and waits for the pace of
  // step `step` (the student's last stage took that step's targets).
  absl::Status AwaitPace(int64_t step, int64_t through);

  const JobSpec& spec_;
  const int teacher_stage_;
  LocalTeacher teacher_;
  StageFrames frames_;
  StageData data_;
  SiteMetrics& metrics_;
  const StepRange steps_;
  const int microbatch_size_;
  std::optional<Sampler> sampler_;  // The first teacher stage.
  int64_t step_;
  int64_t expected_through_;       // Last step whose frames were announced to forward_in.
  int64_t pace_expected_through_;  // Last step whose pace was announced to pace_in.
  std::vector<float> inputs_;
};

}  // namespace strait::site
