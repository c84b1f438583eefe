#include "site/pipeline/site_runner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/tied_embeddings.h"
#include "site/nn/optimizer.h"

namespace strait::site {
namespace {

// Adds the scope's wall time to `timer`, and to `part` too when given (a part of kCompute).
class ScopedTimer {
 public:
  ScopedTimer(SiteMetrics& metrics, Timer timer) : ScopedTimer(metrics, timer, timer) {}
  ScopedTimer(SiteMetrics& metrics, Timer timer, Timer part)
      : metrics_(metrics), timer_(timer), part_(part), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    metrics_.AddTime(timer_, seconds);
    if (part_ != timer_) metrics_.AddTime(part_, seconds);
  }

 private:
  SiteMetrics& metrics_;
  Timer timer_;
  Timer part_;
  std::chrono::steady_clock::time_point start_;
};

// A double crosses a link as the two floats that hold its bits (the lossless chain keeps bits).
std::vector<float> DoubleAsFloats(double value) {
  std::vector<float> out(2);
  std::memcpy(out.data(), &value, sizeof(double));
  return out;
}
double FloatsAsDouble(const std::vector<float>& values) {
  double value;
  std::memcpy(&value, values.data(), sizeof(double));
  return value;
}

}  // namespace

SiteRunner::SiteRunner(const JobSpec& spec, int index, StageExecutor& stage, StageLinks links,
                       StageData data, SiteMetrics& metrics, int64_t total_steps,
                       int64_t start_step, uint32_t generation)
    : spec_(spec),
      index_(index),
      stage_(stage),
      links_(std::move(links)),
      data_(std::move(data)),
      metrics_(metrics),
      total_steps_(total_steps),
      first_step_(start_step),
      generation_(generation),
      microbatch_size_(spec.training.MicrobatchSize()),
      tied_across_(TiedAcrossSites(spec)),
      step_(start_step),
      updates_(start_step),
      expected_through_(start_step - 1) {
  if (spec.Replicas() > 1 && spec.training.sync == ReplicaSync::kOuter) {
    outer_.emplace(static_cast<float>(spec.training.outer.lr),
                   static_cast<float>(spec.training.outer.momentum), stage.param_count());
  }
  if (data_.train) {
    sampler_.emplace(spec.data.seed, data_.train->size, spec.training.global_batch,
                     spec.view_replica, spec.Replicas());
  }
}

v1::TensorKey SiteRunner::Key(int64_t step, int microbatch, int boundary, v1::Direction direction,
                              v1::Purpose purpose) const {
  v1::TensorKey key;
  key.set_job(spec_.name);
  key.set_step(static_cast<uint64_t>(step));
  key.set_microbatch(static_cast<uint32_t>(microbatch));
  key.set_boundary(static_cast<uint32_t>(boundary));
  key.set_direction(direction);
  key.set_purpose(purpose);
  key.set_generation(generation_);
  key.set_replica(static_cast<uint32_t>(spec_.view_replica));
  return key;
}

v1::TensorKey SiteRunner::TiedKey(int64_t step, bool from_first) const {
  return Key(step, 0, 0, from_first ? v1::FORWARD : v1::BACKWARD, v1::TIED);
}

std::vector<int64_t> SiteRunner::TiedShape() const {
  return {spec_.model.gpt.vocab, spec_.model.gpt.dim};
}

FrameSender& SiteRunner::TiedOut() const {
  if (links_.tied_out) return *links_.tied_out;
  return stage_.is_first() ? *links_.forward_out : *links_.backward_out;
}

FrameReceiver& SiteRunner::TiedIn() const {
  if (links_.tied_in) return *links_.tied_in;
  return stage_.is_first() ? *links_.backward_in : *links_.forward_in;
}

void SiteRunner::ExpectStep(int64_t step) {
  const int64_t n = microbatch_size_;
  const bool clip = spec_.training.grad_clip > 0.0;
  for (int m = 0; m < spec_.training.microbatches; ++m) {
    if (links_.forward_in) {
      links_.forward_in->Expect(Key(step, m, index_ - 1, v1::FORWARD),
                                {n, stage_.input_features()});
    }
    if (links_.backward_in) {
      links_.backward_in->Expect(Key(step, m, index_, v1::BACKWARD), {n, stage_.output_features()});
    }
  }
  const bool tied_last = tied_across_ && stage_.is_last();
  if ((clip && links_.forward_in) || tied_last) {
    // What the updates take, in their order (the first stage's tied gradient, then the scale):
    // 1f1b and eager 2bw apply step's gradient after its backwards; deferred 2bw the previous
    // step's (right before the next step's first forward), and its last step both.
    auto expect_update = [&](int64_t of) {
      if (tied_last) TiedIn().Expect(TiedKey(of, /*from_first=*/true), TiedShape());
      if (clip && links_.forward_in) {
        links_.forward_in->Expect(Key(of, 0, index_ - 1, v1::FORWARD, v1::CLIP), {1});
      }
    };
    if (spec_.training.schedule != Schedule::k2BW ||
        spec_.training.update == UpdateTiming::kEager) {
      expect_update(step);
    } else {
      if (step - 1 >= first_step_) expect_update(step - 1);
      if (step == total_steps_ - 1) expect_update(step);
    }
  }
  // kClipNorm's: the last stage's tied gradient, then the norm.
  if (tied_across_ && stage_.is_first()) {
    TiedIn().Expect(TiedKey(step, /*from_first=*/false), TiedShape());
  }
  if (clip && links_.backward_in) {
    links_.backward_in->Expect(Key(step, 0, index_, v1::BACKWARD, v1::CLIP), {2});
  }
  expected_through_ = step;
}

absl::StatusOr<std::vector<float>> SiteRunner::Receive(FrameReceiver& from,
                                                       const v1::TensorKey& key) {
  ScopedTimer timer(metrics_, Timer::kWait);
  return from.Take(key);
}

absl::Status SiteRunner::SendTo(FrameSender& to, const v1::TensorKey& key,
                                std::vector<float> values, std::vector<int64_t> shape) {
  ScopedTimer timer(metrics_, Timer::kWait);  // Only blocks when too much is in flight.
  return to.Send(key, std::move(values), std::move(shape));
}

void SiteRunner::Gather(const Dataset& data, const int64_t* indices, int n) {
  const bool first = stage_.is_first(), last = stage_.is_last();
  if (first) inputs_.resize(static_cast<size_t>(n) * data.features);
  if (last) labels_.resize(static_cast<size_t>(n) * data.targets);
  for (int i = 0; i < n; ++i) {
    if (first) {
      std::copy_n(data.inputs.begin() + indices[i] * data.features, data.features,
                  inputs_.begin() + static_cast<int64_t>(i) * data.features);
    }
    if (last) {
      std::copy_n(data.labels.begin() + indices[i] * data.targets, data.targets,
                  labels_.begin() + static_cast<int64_t>(i) * data.targets);
    }
  }
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
  const int64_t announce_through = then_evaluate ? s : std::min(s + 1, total_steps_ - 1);
  for (int64_t e = expected_through_ + 1; e <= announce_through; ++e) ExpectStep(e);

  if (outer_ && outer_start_.empty()) {  // The round this generation starts in began here.
    STRAIT_ASSIGN_OR_RETURN(outer_start_, stage_.Params());
  }
  StepResult result;
  result.step = s;
  StepTally tally;
  stage_.ZeroGrad(s);  // 2bw: the arena of step s - 2, applied in the previous step.
  for (const ScheduleOp& op : StepOps({t.schedule, static_cast<int>(spec_.sites.size()), index_,
                                       t.microbatches, t.extra_in_flight, t.update},
                                      s, {first_step_, total_steps_ - 1})) {
    switch (op.kind) {
      case ScheduleOp::kForward:
        STRAIT_RETURN_IF_ERROR(RunForward(op.step, op.microbatch, tally));
        break;
      case ScheduleOp::kBackward:
        STRAIT_RETURN_IF_ERROR(RunBackward(op.step, op.microbatch));
        break;
      case ScheduleOp::kClipNorm:
        STRAIT_RETURN_IF_ERROR(KeepFreshGrads(op.step));
        STRAIT_RETURN_IF_ERROR(ShareTiedGrad(op.step));
        STRAIT_RETURN_IF_ERROR(AverageReplicaGrads(op.step));
        STRAIT_RETURN_IF_ERROR(SendNorm(op.step));
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
  STRAIT_RETURN_IF_ERROR(MaybeOuterRound(s + 1));
  if (stage_.is_last()) {  // Warm-up 0: every forward of step s ran in Step(s).
    result.loss = tally.loss_sum / (t.global_batch * spec_.model.TargetsPerSample());
    result.accuracy =
        static_cast<double>(tally.correct) / (t.global_batch * spec_.model.TargetsPerSample());
  }
  ++step_;
  return result;
}

absl::Status SiteRunner::RunForward(int64_t step, int m, StepTally& tally) {
  const TrainingSpec& t = spec_.training;
  const int mb = microbatch_size_;
  const bool first = stage_.is_first(), last = stage_.is_last();
  if (sampler_) Gather(*data_.train, sampler_->Batch(step).data() + int64_t{m} * mb, mb);
  if (m == t.microbatches - 1 && LaggedClip(t)) STRAIT_RETURN_IF_ERROR(PassLaggedScale(step));
  std::vector<float> input;
  if (!first) {
    STRAIT_ASSIGN_OR_RETURN(input,
                            Receive(*links_.forward_in, Key(step, m, index_ - 1, v1::FORWARD)));
  }
  std::vector<float> output(last ? 0 : static_cast<size_t>(mb) * stage_.output_features());
  {
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kForward);
    ForwardOptions options;
    options.weights = ForwardWeights(t, static_cast<int>(spec_.sites.size()), index_, step, m);
    options.dropout_microbatch_offset = spec_.view_replica * t.microbatches;
    STRAIT_RETURN_IF_ERROR(stage_.Forward(step, m, mb, first ? inputs_.data() : input.data(),
                                          last ? nullptr : output.data(), options));
    if (last) {
      // The loss is the mean over the step's targets (tokens, for a language model).
      const int64_t targets = int64_t{t.global_batch} * spec_.model.TargetsPerSample();
      STRAIT_ASSIGN_OR_RETURN(LossResult loss,
                              stage_.Loss(m, labels_.data(), 1.0f / static_cast<float>(targets)));
      tally.loss_sum += loss.loss_sum;
      tally.correct += loss.correct;
    }
  }
  if (last) return absl::OkStatus();
  return SendTo(*links_.forward_out, Key(step, m, index_, v1::FORWARD), std::move(output),
                {mb, stage_.output_features()});
}

absl::Status SiteRunner::RunBackward(int64_t step, int m) {
  const int mb = microbatch_size_;
  const bool first = stage_.is_first(), last = stage_.is_last();
  std::vector<float> grad_output;
  if (!last) {
    STRAIT_ASSIGN_OR_RETURN(grad_output,
                            Receive(*links_.backward_in, Key(step, m, index_, v1::BACKWARD)));
  }
  std::vector<float> grad_input(first ? 0 : static_cast<size_t>(mb) * stage_.input_features());
  {
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kBackward);
    // Backward passes run in microbatch order, so the last one all-reduces the workers' sums.
    STRAIT_RETURN_IF_ERROR(stage_.Backward(m, last ? nullptr : grad_output.data(),
                                           first ? nullptr : grad_input.data(),
                                           /*last_of_step=*/m == spec_.training.microbatches - 1));
  }
  if (first) return absl::OkStatus();
  return SendTo(*links_.backward_out, Key(step, m, index_ - 1, v1::BACKWARD), std::move(grad_input),
                {mb, stage_.input_features()});
}

absl::Status SiteRunner::ShareTiedGrad(int64_t s) {
  if (!tied_across_) {
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kUpdate);
    return stage_.TieLocalGrads(s);  // One site holds both copies (or none: a no-op).
  }
  if (!stage_.is_first() && !stage_.is_last()) return absl::OkStatus();
  std::vector<float> own;
  {
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kUpdate);
    STRAIT_ASSIGN_OR_RETURN(own, stage_.TiedGrad(s));
  }
  STRAIT_RETURN_IF_ERROR(
      SendTo(TiedOut(), TiedKey(s, stage_.is_first()), std::move(own), TiedShape()));
  if (!stage_.is_first()) return absl::OkStatus();  // The last stage adds the first's at kUpdate.
  STRAIT_ASSIGN_OR_RETURN(std::vector<float> other,
                          Receive(TiedIn(), TiedKey(s, /*from_first=*/false)));
  ScopedTimer timer(metrics_, Timer::kCompute, Timer::kUpdate);
  return stage_.AddTiedGrad(s, other);
}

absl::Status SiteRunner::AverageReplicaGrads(int64_t s) {
  if (spec_.Replicas() < 2 || spec_.training.sync != ReplicaSync::kEveryStep) {
    return absl::OkStatus();
  }
  std::vector<float> grads;
  {
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kUpdate);
    STRAIT_ASSIGN_OR_RETURN(grads, stage_.Grads(s));
  }
  STRAIT_ASSIGN_OR_RETURN(
      std::vector<float> mean,
      MeanOverReplicas("grad", s, std::move(grads),
                       FixedPointSumFormat(spec_.training.fixed_point_bits, spec_.Replicas())));
  ScopedTimer timer(metrics_, Timer::kCompute, Timer::kUpdate);
  return stage_.SetGrads(s, mean);
}

absl::Status SiteRunner::MaybeOuterRound(int64_t steps_done) {
  if (!outer_ || (steps_done % spec_.training.outer.every != 0 && steps_done != total_steps_)) {
    return absl::OkStatus();
  }
  spdlog::info(
      "outer round after step {}: averaging the pseudo-gradient with the replicas of "
      "stage {}",
      steps_done, index_);
  std::vector<float> delta;
  {
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kUpdate);
    STRAIT_ASSIGN_OR_RETURN(delta, stage_.Params());
    outer_residual_.resize(delta.size(), 0.0f);
    for (size_t i = 0; i < delta.size(); ++i) {
      delta[i] = outer_start_[i] - delta[i] + outer_residual_[i];
    }
  }
  const TrainingSpec& t = spec_.training;
  const SumFormat format =
      OuterSumFormat(t.outer.bits, t.fixed_point_bits, spec_.Replicas(), outer_last_mean_);
  std::vector<float> own;
  STRAIT_ASSIGN_OR_RETURN(std::vector<float> mean,
                          MeanOverReplicas("outer", steps_done, delta, format, &own));
  ScopedTimer timer(metrics_, Timer::kCompute, Timer::kUpdate);
  for (size_t i = 0; i < delta.size(); ++i) outer_residual_[i] = delta[i] - own[i];
  STRAIT_RETURN_IF_ERROR(outer_->Step(mean, outer_start_));
  outer_last_mean_ = std::move(mean);
  return stage_.SetParams(outer_start_);
}

std::optional<std::vector<float>> SiteRunner::OuterState() const {
  if (!outer_) return std::nullopt;
  std::vector<float> state = outer_->momentum_buffer();
  state.insert(state.end(), outer_residual_.begin(), outer_residual_.end());
  state.resize(2 * outer_->momentum_buffer().size(), 0.0f);  // No residual before a round.
  state.insert(state.end(), outer_last_mean_.begin(), outer_last_mean_.end());
  return state;
}

absl::Status SiteRunner::SetOuterState(std::span<const float> state) {
  if (!outer_) return absl::FailedPreconditionError("this job has no outer rounds");
  const size_t n = static_cast<size_t>(stage_.param_count());
  if (state.size() != 2 * n && state.size() != 3 * n) {
    return absl::InvalidArgumentError(
        absl::StrCat("outer state of ", state.size(), " floats for a stage of ", n, " parameters"));
  }
  STRAIT_RETURN_IF_ERROR(outer_->SetMomentum(state.first(n)));
  outer_residual_.assign(state.begin() + n, state.begin() + 2 * n);
  outer_last_mean_.assign(state.begin() + 2 * n, state.end());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> SiteRunner::MeanOverReplicas(const std::string& what,
                                                                int64_t round,
                                                                std::vector<float> values,
                                                                const SumFormat& format,
                                                                std::vector<float>* own) {
  if (!links_.sum_out || !links_.sum_in || !links_.mask) {
    return absl::FailedPreconditionError("this stage has no link to its replicas' sums");
  }
  const size_t n = values.size();
  std::vector<uint32_t> words(n);
  {
    ScopedTimer timer(metrics_, Timer::kSeal);  // Quantising and masking are this path's sealing.
    const int64_t clamped = QuantizeForSum(values, format, words);
    if (clamped > 0 && clamped_ == 0) {
      spdlog::warn(
          "{} of {} values of the {} sum of step {} lie outside the fixed point's range "
          "({} bits) and were clamped",
          clamped, n, what, round, format.bits);
    }
    clamped_ += clamped;
    if (own != nullptr) {
      own->resize(n);
      DequantizeOwn(words, format, *own);
    }
    STRAIT_RETURN_IF_ERROR(links_.mask(
        absl::StrCat(what, "/stage ", index_, "/round ", round, "/generation ", generation_),
        words));
    words = PackLanes(words, format.bits);
  }
  const int lanes = format.lanes();
  std::vector<float> packed(words.size());
  std::memcpy(packed.data(), words.data(), words.size() * sizeof(uint32_t));
  const std::vector<int64_t> shape = {static_cast<int64_t>(words.size())};
  const v1::TensorKey back = Key(round, lanes, index_, v1::BACKWARD, v1::SUM);
  links_.sum_in->Expect(back, shape);
  STRAIT_RETURN_IF_ERROR(SendTo(*links_.sum_out, Key(round, lanes, index_, v1::FORWARD, v1::SUM),
                                std::move(packed), shape));
  STRAIT_ASSIGN_OR_RETURN(std::vector<float> sum, Receive(*links_.sum_in, back));
  std::memcpy(words.data(), sum.data(), words.size() * sizeof(uint32_t));
  std::vector<float> mean(n);
  MeanOfSum(UnpackLanes(words, format.bits, n), format, mean);
  return mean;
}

absl::Status SiteRunner::KeepFreshGrads(int64_t s) {
  const float kept =
      KeptGradientScale(spec_.training, static_cast<int>(spec_.sites.size()), index_, s);
  if (kept == 1.0f) return absl::OkStatus();
  ScopedTimer timer(metrics_, Timer::kCompute, Timer::kUpdate);
  return stage_.ScaleGrads(s, stage_.range(), kept);
}

absl::Status SiteRunner::SendNorm(int64_t s) {
  if (spec_.training.grad_clip <= 0.0) return absl::OkStatus();
  double downstream = 0.0;
  if (links_.backward_in) {
    STRAIT_ASSIGN_OR_RETURN(
        std::vector<float> sum,
        Receive(*links_.backward_in, Key(s, 0, index_, v1::BACKWARD, v1::CLIP)));
    downstream = FloatsAsDouble(sum);
  }
  double total;
  {
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kUpdate);
    STRAIT_ASSIGN_OR_RETURN(total, stage_.GradSumSquares(downstream, s));
  }
  if (links_.backward_out) {
    return SendTo(*links_.backward_out, Key(s, 0, index_ - 1, v1::BACKWARD, v1::CLIP),
                  DoubleAsFloats(total), {2});
  }
  const float scale = GlobalNormClipScale(total, spec_.training.grad_clip);
  if (LaggedClip(spec_.training)) {
    stage_.set_lagged_clip_scale(scale);  // For the next step (PassLaggedScale).
  } else {
    scales_[s] = scale;
  }
  return absl::OkStatus();
}

absl::Status SiteRunner::PassLaggedScale(int64_t s) {
  float scale;
  if (links_.forward_in) {
    STRAIT_ASSIGN_OR_RETURN(
        std::vector<float> relayed,
        Receive(*links_.forward_in, Key(s, 0, index_ - 1, v1::FORWARD, v1::CLIP)));
    scale = relayed[0];
  } else {
    scale = stage_.lagged_clip_scale();  // Of step s - 1's norm: its SendNorm came before.
  }
  scales_[s] = scale;
  if (!links_.forward_out) return absl::OkStatus();
  return SendTo(*links_.forward_out, Key(s, 0, index_, v1::FORWARD, v1::CLIP), {scale}, {1});
}

absl::Status SiteRunner::Update(int64_t s) {
  if (tied_across_ && stage_.is_last()) {
    STRAIT_ASSIGN_OR_RETURN(std::vector<float> first,
                            Receive(TiedIn(), TiedKey(s, /*from_first=*/true)));
    ScopedTimer timer(metrics_, Timer::kCompute, Timer::kUpdate);
    STRAIT_RETURN_IF_ERROR(stage_.AddTiedGrad(s, first));
  }
  float scale = 1.0f;
  if (spec_.training.grad_clip > 0.0) {
    if (links_.forward_in && !LaggedClip(spec_.training)) {
      STRAIT_ASSIGN_OR_RETURN(
          std::vector<float> relayed,
          Receive(*links_.forward_in, Key(s, 0, index_ - 1, v1::FORWARD, v1::CLIP)));
      scale = relayed[0];
    } else {
      auto it = scales_.find(s);
      if (it == scales_.end()) {
        return absl::InternalError(absl::StrCat("update of step ", s, " before its clipping norm"));
      }
      scale = it->second;
      scales_.erase(it);
    }
    if (links_.forward_out && !LaggedClip(spec_.training)) {
      STRAIT_RETURN_IF_ERROR(
          SendTo(*links_.forward_out, Key(s, 0, index_, v1::FORWARD, v1::CLIP), {scale}, {1}));
    }
  }
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
  const bool first = stage_.is_first(), last = stage_.is_last();
  const int64_t size = data_.test ? data_.test->size : data_.test_size;
  const int64_t batches = (size + microbatch_size_ - 1) / microbatch_size_;
  auto rows = [&](int64_t b) {
    return static_cast<int>(std::min<int64_t>(microbatch_size_, size - b * microbatch_size_));
  };
  if (links_.forward_in) {
    for (int64_t b = 0; b < batches; ++b) {
      links_.forward_in->Expect(Key(step_, static_cast<int>(b), index_ - 1, v1::FORWARD, v1::EVAL),
                                {rows(b), stage_.input_features()});
    }
  }
  std::vector<int64_t> indices(microbatch_size_);
  LossResult sum;
  for (int64_t b = 0; b < batches; ++b) {
    const int n = rows(b);
    if (data_.test) {
      for (int i = 0; i < n; ++i) indices[i] = b * microbatch_size_ + i;
      Gather(*data_.test, indices.data(), n);
    }
    std::vector<float> input;
    if (!first) {
      STRAIT_ASSIGN_OR_RETURN(
          input, Receive(*links_.forward_in,
                         Key(step_, static_cast<int>(b), index_ - 1, v1::FORWARD, v1::EVAL)));
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
      STRAIT_RETURN_IF_ERROR(SendTo(*links_.forward_out,
                                    Key(step_, static_cast<int>(b), index_, v1::FORWARD, v1::EVAL),
                                    std::move(output), {n, stage_.output_features()}));
    }
  }
  if (!last) return std::optional<Evaluation>();
  Evaluation e = MeanOverTargets(sum.loss_sum, sum.correct,
                                 static_cast<double>(size) * spec_.model.TargetsPerSample());
  if (data_.test) e.bytes_per_token = data_.test->bytes_per_token;
  return std::optional<Evaluation>(e);
}

absl::Status SiteRunner::Flush() {
  ScopedTimer timer(metrics_, Timer::kWait);
  if (links_.forward_out) STRAIT_RETURN_IF_ERROR(links_.forward_out->Flush());
  if (links_.backward_out) STRAIT_RETURN_IF_ERROR(links_.backward_out->Flush());
  if (links_.tied_out) STRAIT_RETURN_IF_ERROR(links_.tied_out->Flush());
  if (links_.sum_out) STRAIT_RETURN_IF_ERROR(links_.sum_out->Flush());
  return absl::OkStatus();
}

void SiteRunner::Abort(const absl::Status& status) {
  if (links_.forward_in) links_.forward_in->Stop(status);
  if (links_.backward_in) links_.backward_in->Stop(status);
  if (links_.forward_out) links_.forward_out->Stop(status);
  if (links_.backward_out) links_.backward_out->Stop(status);
  if (links_.tied_in) links_.tied_in->Stop(status);
  if (links_.tied_out) links_.tied_out->Stop(status);
  if (links_.sum_in) links_.sum_in->Stop(status);
  if (links_.sum_out) links_.sum_out->Stop(status);
}

}  // namespace strait::site
