#include "site/pipeline/site_runner.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/exchange/teacher_targets_codec.h"
#include "site/pipeline/local_teacher.h"
#include "site/pipeline/scoped_timer.h"

namespace strait::site {

SiteRunner::SiteRunner(const JobSpec& spec, int index, StageExecutor& stage, StageIo io,
                       SiteMetrics& metrics, StepRange steps)
    : spec_(spec),
      index_(index),
      stage_(stage),
      frames_(spec, io.replica, index, steps.generation, std::move(io.links), metrics),
      data_(std::move(io.data)),
      metrics_(metrics),
      steps_(steps),
      microbatch_size_(spec.training.MicrobatchSize()),
      clip_(frames_, stage),
      tied_(frames_, stage),
      means_(frames_, stage),
      step_(steps.start_step),
      updates_(steps.start_step),
      outer_through_(steps.start_step),
      expected_through_(steps.start_step - 1) {
  if (OuterRounds::Used(spec)) {
    outer_ = std::make_unique<OuterRounds>(frames_, steps.total_steps, means_, stage);
  }
  if (data_.train) {
    sampler_.emplace(spec.data.seed, data_.train->size, spec.training.global_batch,
                     frames_.replica(), spec.Replicas());
  }
}

void SiteRunner::ExpectStep(int64_t step) {
  const StageLinks& links = frames_.links();
  const int64_t n = microbatch_size_;
  for (int m = 0; m < spec_.training.microbatches; ++m) {
    if (links.forward_in) {
      links.forward_in->ExpectBoundary(Key(step, m, index_ - 1, v1::FORWARD),
                                       ActivationShape(spec_.model, n, stage_.input_features()),
                                       stage_.boundary_payloads());
    }
    if (links.backward_in) {
      links.backward_in->ExpectBoundary(Key(step, m, index_, v1::BACKWARD),
                                        ActivationShape(spec_.model, n, stage_.output_features()),
                                        stage_.boundary_payloads());
    }
    if (links.teacher_in) links.teacher_in->ExpectBytes(TeacherKey(step, m));
  }
  // What the updates take, in their order (the first stage's tied gradient, then the scale):
  // 1f1b and eager 2bw apply step's gradient after its backwards; deferred 2bw the previous
  // step's (right before the next step's first forward), and its last step both.
  auto expect_update = [&](int64_t of) {
    tied_.ExpectAtUpdate(of);
    clip_.ExpectScale(of);
  };
  if (spec_.training.schedule != Schedule::k2BW || spec_.training.update == UpdateTiming::kEager) {
    expect_update(step);
  } else {
    if (step - 1 >= steps_.start_step) expect_update(step - 1);
    if (step == steps_.total_steps - 1) expect_update(step);
  }
  // kClipNorm's: the last stage's tied gradient, then the norm.
  tied_.ExpectAtNorm(step);
  clip_.ExpectNorm(step);
  expected_through_ = step;
}

absl::Status SiteRunner::Gather(const Dataset& data, const int64_t* indices, int n) {
  return GatherSamples(data, indices, n, stage_.is_first() ? &inputs_ : nullptr,
                       stage_.is_last() ? &labels_ : nullptr);
}

absl::StatusOr<StepResult> SiteRunner::Step(bool then_evaluate) {
  const TrainingSpec& t = spec_.training;
  const int64_t s = step_;
  if (then_evaluate && t.schedule == Schedule::k2BW) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot evaluate after step ", s + 1,
                     ": schedule 2bw never flushes the pipeline between steps"));
  }
  // One step ahead: 2bw's Step(s) also runs step s + 1's first forwards. Not before an evaluation:
  // its frames come between the two steps on every link.
  const int64_t announce_through = then_evaluate ? s : std::min(s + 1, steps_.total_steps - 1);
  for (int64_t e = expected_through_ + 1; e <= announce_through; ++e) ExpectStep(e);

  if (outer_) STRAIT_RETURN_IF_ERROR(outer_->Begin());  // The round began here (taken once).
  StepResult result;
  result.step = s;
  StepTally tally;
  stage_.ZeroGrad(s);  // 2bw: the arena of step s - 2, applied in the previous step.
  for (const ScheduleOp& op : StepOps({t.schedule, static_cast<int>(spec_.sites.size()), index_,
                                       t.microbatches, t.extra_in_flight, t.update},
                                      s, {steps_.start_step, steps_.total_steps - 1})) {
    switch (op.kind) {
      case ScheduleOp::kForward:
        STRAIT_RETURN_IF_ERROR(RunForward(op.step, op.microbatch, tally));
        break;
      case ScheduleOp::kBackward:
        STRAIT_RETURN_IF_ERROR(RunBackward(op.step, op.microbatch));
        break;
      case ScheduleOp::kClipNorm:
        STRAIT_RETURN_IF_ERROR(EndBackwards(op.step));
        break;
      case ScheduleOp::kUpdate: {
        // Deferred 2bw updates step s's gradient in Step(s) only as the run's last op.
        const bool drain =
            t.schedule == Schedule::k2BW && t.update == UpdateTiming::kDeferred && op.step == s;
        const auto start = std::chrono::steady_clock::now();
        STRAIT_RETURN_IF_ERROR(Update(op.step));
        if (drain) {
          result.drain_s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
        break;
      }
    }
  }
  // The rounds follow updates, not steps: deferred 2bw's Step(s) applies update s (checkpoint s
  // is taken after it), and a restored generation's first step applies none.
  if (outer_ && updates_ > outer_through_) {
    STRAIT_RETURN_IF_ERROR(outer_->AfterUpdate(updates_));
    outer_through_ = updates_;
  }
  if (stage_.is_last()) {  // Warm-up 0: every forward of step s ran in Step(s).
    result.loss = tally.loss_sum / (t.global_batch * spec_.model.TargetsPerSample());
    result.accuracy =
        static_cast<double>(tally.correct) / (t.global_batch * spec_.model.TargetsPerSample());
  }
  ++step_;
  return result;
}

absl::Status SiteRunner::RunForward(int64_t step, int m, StepTally& tally) {
  const StageLinks& links = frames_.links();
  const TrainingSpec& t = spec_.training;
  const int mb = microbatch_size_;
  const bool first = stage_.is_first(), last = stage_.is_last();
  if (sampler_) {
    STRAIT_RETURN_IF_ERROR(
        Gather(*data_.train, sampler_->Batch(step).data() + int64_t{m} * mb, mb));
  }
  if (m == t.microbatches - 1 && LaggedClip(t)) STRAIT_RETURN_IF_ERROR(clip_.PassLaggedScale(step));
  DecodedBoundary input;
  if (!first) {
    STRAIT_ASSIGN_OR_RETURN(
        input, frames_.ReceiveBoundary(*links.forward_in, Key(step, m, index_ - 1, v1::FORWARD)));
  }
  std::optional<OutgoingTensor> output;
  if (!last) {
    output.emplace(*links.forward_out, stage_.boundary_payloads(),
                   static_cast<size_t>(mb) * stage_.output_features());
  }
  {
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kForward);
    ForwardOptions options;
    options.weights = ForwardWeights(t, static_cast<int>(spec_.sites.size()), index_, step, m);
    options.dropout_microbatch_offset = frames_.replica() * t.microbatches;
    STRAIT_RETURN_IF_ERROR(stage_.Forward(step, m, mb,
                                          first ? BoundaryIn(inputs_.data()) : input.in(),
                                          last ? BoundaryOut() : output->out(), options));
  }
  if (last) {
    // The loss is the mean over the step's targets (tokens, for a language model).
    const int64_t targets = int64_t{t.global_batch} * spec_.model.TargetsPerSample();
    STRAIT_ASSIGN_OR_RETURN(LossResult loss,
                            MicrobatchLoss(step, m, 1.0f / static_cast<float>(targets)));
    tally.loss_sum += loss.loss_sum;
    tally.correct += loss.correct;
    return absl::OkStatus();
  }
  return frames_.Send(*links.forward_out, Key(step, m, index_, v1::FORWARD), *output,
                      ActivationShape(spec_.model, mb, stage_.output_features()));
}

v1::TensorKey SiteRunner::TeacherKey(int64_t step, int m) const {
  return Key(step, m, spec_.TeacherStages() - 1, v1::FORWARD, v1::TEACH);
}

absl::StatusOr<LossResult> SiteRunner::MicrobatchLoss(int64_t step, int m, float grad_scale) {
  const StageLinks& links = frames_.links();
  if (!links.teacher_in) {
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kForward);
    return stage_.Loss(m, labels_.data(), grad_scale);
  }
  // Taken after the forward pass, which ran while they travelled.
  STRAIT_ASSIGN_OR_RETURN(const std::string bytes,
                          frames_.ReceiveTargets(*links.teacher_in, TeacherKey(step, m)));
  absl::StatusOr<LossResult> loss;
  {
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kForward);
    absl::StatusOr<TeacherTargets> targets = DecodeTeacherTargets(
        bytes, int64_t{microbatch_size_} * spec_.model.TargetsPerSample(), spec_.model.Classes());
    if (!targets.ok()) {  // Sealed by the teacher, so its own encoder's fault: no tampering.
      return absl::Status(targets.status().code(),
                          absl::StrCat("the teacher's targets of step ", step, ", microbatch ", m,
                                       ": ", targets.status().message()));
    }
    loss = stage_.DistillLoss(m, labels_.data(), *targets, DistillTermsOf(spec_.training.distill),
                              grad_scale);
  }
  if (loss.ok() && m == spec_.training.microbatches - 1) {  // All taken: the teacher's pace.
    STRAIT_RETURN_IF_ERROR(frames_.SendTargets(
        *links.pace_out, Key(step, 0, 0, v1::BACKWARD, v1::TEACH), std::string(1, '\0')));
  }
  return loss;
}

absl::Status SiteRunner::RunBackward(int64_t step, int m) {
  const StageLinks& links = frames_.links();
  const int mb = microbatch_size_;
  const bool first = stage_.is_first(), last = stage_.is_last();
  DecodedBoundary grad_output;
  if (!last) {
    STRAIT_ASSIGN_OR_RETURN(
        grad_output,
        frames_.ReceiveBoundary(*links.backward_in, Key(step, m, index_, v1::BACKWARD)));
  }
  std::optional<OutgoingTensor> grad_input;
  if (!first) {
    grad_input.emplace(*links.backward_out, stage_.boundary_payloads(),
                       static_cast<size_t>(mb) * stage_.input_features());
  }
  {
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kBackward);
    // Backward passes run in microbatch order, so the last one all-reduces the workers' sums.
    STRAIT_RETURN_IF_ERROR(stage_.Backward(m, last ? BoundaryIn() : grad_output.in(),
                                           first ? BoundaryOut() : grad_input->out(),
                                           /*last_of_step=*/m == spec_.training.microbatches - 1));
  }
  if (first) return absl::OkStatus();
  return frames_.Send(*links.backward_out, Key(step, m, index_ - 1, v1::BACKWARD), *grad_input,
                      ActivationShape(spec_.model, mb, stage_.input_features()));
}

std::optional<std::vector<float>> SiteRunner::OuterState() const {
  if (!outer_) return std::nullopt;
  return outer_->State();
}

absl::Status SiteRunner::SetOuterState(std::span<const float> state) {
  if (!outer_) return absl::FailedPreconditionError("this job has no outer rounds");
  return outer_->SetState(state);
}

absl::Status SiteRunner::KeepFreshGrads(int64_t s) {
  const float kept =
      KeptGradientScale(spec_.training, static_cast<int>(spec_.sites.size()), index_, s);
  if (kept == 1.0f) return absl::OkStatus();
  ScopedTimer timer(metrics_, Timer::kCompute, Timer::kUpdate);
  return stage_.ScaleGrads(s, stage_.range(), kept);
}

absl::Status SiteRunner::EndBackwards(int64_t s) {
  STRAIT_RETURN_IF_ERROR(KeepFreshGrads(s));
  STRAIT_RETURN_IF_ERROR(tied_.Share(s));
  STRAIT_RETURN_IF_ERROR(means_.AverageGrads(s));
  return clip_.SendNorm(s);
}

absl::Status SiteRunner::Update(int64_t s) {
  STRAIT_RETURN_IF_ERROR(tied_.AddAtUpdate(s));
  STRAIT_ASSIGN_OR_RETURN(const float scale, clip_.TakeScale(s));
  ScopedTimer timer(metrics_, Timer::kCompute, Timer::kUpdate);
  STRAIT_RETURN_IF_ERROR(stage_.OptimizerStep(s + 1, scale));
  updates_ = s + 1;
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Evaluation>> SiteRunner::Evaluate() {
  if (expected_through_ >= step_) {
    // The receivers would wait for the next step's frames before the evaluation's.
    return absl::FailedPreconditionError(
        absl::StrCat("evaluation after step ", step_,
                     ": the next step's frames are announced already (evaluating between steps "
                     "needs Step(/*then_evaluate=*/true) before, and a schedule that flushes)"));
  }
  const StageLinks& links = frames_.links();
  const bool first = stage_.is_first(), last = stage_.is_last();
  const int64_t size = data_.test ? data_.test->size : data_.test_size;
  const int64_t batches = (size + microbatch_size_ - 1) / microbatch_size_;
  auto rows = [&](int64_t b) {
    return static_cast<int>(std::min<int64_t>(microbatch_size_, size - b * microbatch_size_));
  };
  if (links.forward_in) {
    for (int64_t b = 0; b < batches; ++b) {
      links.forward_in->Expect(Key(step_, static_cast<int>(b), index_ - 1, v1::FORWARD, v1::EVAL),
                               ActivationShape(spec_.model, rows(b), stage_.input_features()));
    }
  }
  std::vector<int64_t> indices(microbatch_size_);
  LossResult sum;
  for (int64_t b = 0; b < batches; ++b) {
    const int n = rows(b);
    if (data_.test) {
      for (int i = 0; i < n; ++i) indices[i] = b * microbatch_size_ + i;
      STRAIT_RETURN_IF_ERROR(Gather(*data_.test, indices.data(), n));
    }
    std::vector<float> input;
    if (!first) {
      STRAIT_ASSIGN_OR_RETURN(
          input, frames_.Receive(*links.forward_in, Key(step_, static_cast<int>(b), index_ - 1,
                                                        v1::FORWARD, v1::EVAL)));
    }
    std::vector<float> output(last ? 0 : static_cast<size_t>(n) * stage_.output_features());
    {
      ScopedTimer timer(metrics_, Timer::kCompute);
      absl::Status forward = stage_.Forward(step_, 0, n, first ? inputs_.data() : input.data(),
                                            last ? nullptr : output.data(), {.training = false});
      absl::StatusOr<LossResult> loss =
          forward.ok() && last ? stage_.Loss(0, labels_.data(), 0.0f) : LossResult{};
      stage_.Discard(0);
      STRAIT_RETURN_IF_ERROR(forward);
      if (!loss.ok()) return loss.status();
      sum.loss_sum += loss->loss_sum;
      sum.correct += loss->correct;
    }
    if (!last) {
      STRAIT_RETURN_IF_ERROR(frames_.Send(
          *links.forward_out, Key(step_, static_cast<int>(b), index_, v1::FORWARD, v1::EVAL),
          std::move(output), ActivationShape(spec_.model, n, stage_.output_features())));
    }
  }
  if (!last) return std::optional<Evaluation>();
  Evaluation e = MeanOverTargets(sum.loss_sum, sum.correct,
                                 static_cast<double>(size) * spec_.model.TargetsPerSample());
  if (data_.test) e.bytes_per_token = data_.test->bytes_per_token;
  return std::optional<Evaluation>(e);
}

absl::Status SiteRunner::Flush() { return frames_.Flush(); }

void SiteRunner::Abort(const absl::Status& status) { frames_.Abort(status); }

}  // namespace strait::site
