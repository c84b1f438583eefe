#include "site/pipeline/teacher_runner.h"

#include <algorithm>

#include "core/status.h"
#include "core/teach_links.h"
#include "site/exchange/teacher_targets_codec.h"
#include "site/pipeline/scoped_timer.h"

namespace strait::site {

TeacherRunner::TeacherRunner(const JobSpec& spec, int teacher_stage, StageExecutor& stage,
                             StageIo io, SiteMetrics& metrics, StepRange steps)
    : spec_(spec),
      teacher_stage_(teacher_stage),
      teacher_(spec, stage),
      frames_(spec, /*replica=*/0, teacher_stage, steps.generation, std::move(io.links), metrics),
      data_(std::move(io.data)),
      metrics_(metrics),
      steps_(steps),
      microbatch_size_(spec.training.MicrobatchSize()),
      step_(steps.start_step),
      expected_through_(steps.start_step - 1),
      pace_expected_through_(steps.start_step - 1) {
  if (teacher_.is_first()) {
    // The student's first stage's sampler: the same batches, in the same order.
    sampler_.emplace(spec.data.seed, data_.train->size, spec.training.global_batch);
  }
}

absl::StatusOr<StepResult> TeacherRunner::Step(bool /*then_evaluate*/) {
  const int64_t s = step_;
  // Announced a step ahead, so that the next step's frames are pulled while this one computes.
  if (FrameReceiver* in = frames_.links().forward_in.get()) {
    for (int64_t e = expected_through_ + 1; e <= std::min(s + 1, steps_.total_steps - 1); ++e) {
      for (int m = 0; m < spec_.training.microbatches; ++m) {
        in->Expect(
            Key(e, m, teacher_stage_ - 1),
            ActivationShape(spec_.teacher.model, microbatch_size_, teacher_.input_features()));
      }
      expected_through_ = e;
    }
  }
  if (frames_.links().pace_in && s - kTeacherLeadSteps >= steps_.start_step) {
    STRAIT_RETURN_IF_ERROR(AwaitPace(s - kTeacherLeadSteps, s + 1 - kTeacherLeadSteps));
  }
  for (int m = 0; m < spec_.training.microbatches; ++m) STRAIT_RETURN_IF_ERROR(RunForward(s, m));
  ++step_;
  // The last step: stays until the student has taken everything (its end is the teacher's).
  if (frames_.links().pace_in && step_ == steps_.total_steps) {
    const int64_t last = steps_.total_steps - 1;
    for (int64_t e = std::max(steps_.start_step, last + 1 - kTeacherLeadSteps); e <= last; ++e) {
      STRAIT_RETURN_IF_ERROR(AwaitPace(e, last));
    }
  }
  return StepResult{.step = s};
}

absl::Status TeacherRunner::AwaitPace(int64_t step, int64_t through) {
  FrameReceiver& in = *frames_.links().pace_in;
  auto key = [&](int64_t e) { return frames_.Key(e, 0, 0, v1::BACKWARD, v1::TEACH); };
  for (int64_t e = std::max(pace_expected_through_ + 1, steps_.start_step); e <= through; ++e) {
    in.ExpectBytes(key(e));
    pace_expected_through_ = e;
  }
  ScopedTimer timer(metrics_, Timer::kWait);
  return in.TakeBytes(key(step)).status();
}

absl::Status TeacherRunner::RunForward(int64_t step, int m) {
  const StageLinks& links = frames_.links();
  const int mb = microbatch_size_;
  std::vector<float> input;
  if (sampler_) {
    STRAIT_RETURN_IF_ERROR(GatherSamples(
        *data_.train, sampler_->Batch(step).data() + int64_t{m} * mb, mb, &input, nullptr));
  } else {
    STRAIT_ASSIGN_OR_RETURN(input,
                            frames_.Receive(*links.forward_in, Key(step, m, teacher_stage_ - 1)));
  }
  const v1::TensorKey out = Key(step, m, teacher_stage_);
  if (teacher_.is_last()) {
    std::string bytes;
    {
      ScopedTimer timer(metrics_, Timer::kCompute, Timer::kForward);
      STRAIT_ASSIGN_OR_RETURN(const TeacherTargets targets,
                              teacher_.Targets(step, mb, input.data()));
      bytes = EncodeTeacherTargets(targets, spec_.teacher.values, spec_.model.Classes());
    }
    return frames_.SendTargets(*links.forward_out, out, std::move(bytes));
  }
  std::vector<float> output(static_cast<size_t>(mb) * teacher_.output_features());
  {
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kForward);
    STRAIT_RETURN_IF_ERROR(teacher_.Forward(step, mb, input.data(), output.data()));
  }
  return frames_.Send(*links.forward_out, out, std::move(output),
                      ActivationShape(spec_.teacher.model, mb, teacher_.output_features()));
}

}  // namespace strait::site
