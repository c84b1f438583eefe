#include "site/pipeline/trainer.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/schedule.h"
#include "core/status.h"
#include "site/exchange/teacher_targets_codec.h"
#include "site/pipeline/stage_checkpoint.h"

namespace strait::site {
namespace {

// One worker, on `backend`: the executor takes it over when it makes its workers.
StageWorkers OneWorkerOn(std::unique_ptr<Backend>& backend) {
  StageWorkers worker;
  worker.make_backend = [&backend](int) -> absl::StatusOr<std::unique_ptr<Backend>> {
    return std::move(backend);
  };
  return worker;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const JobSpec& spec,
                                                         std::unique_ptr<Backend> backend,
                                                         std::unique_ptr<Backend> teacher_backend) {
  STRAIT_ASSIGN_OR_RETURN(Dataset train, LoadDataset(spec.data, spec.model, Split::kTrain));
  STRAIT_ASSIGN_OR_RETURN(Dataset test, LoadDataset(spec.data, spec.model, Split::kTest));
  if (train.size < spec.training.global_batch) {
    return absl::InvalidArgumentError(absl::StrCat("the training set has ", train.size,
                                                   " samples, fewer than one global batch of ",
                                                   spec.training.global_batch));
  }
  std::unique_ptr<Trainer> t(new Trainer(spec, std::move(train), std::move(test)));
  STRAIT_ASSIGN_OR_RETURN(
      t->stage_,
      site::StageExecutor::Create(spec.model, LayerRange{0, spec.model.NumLayers()},
                                  WithDecayHorizon(spec.training.optimizer, t->total_steps()),
                                  spec.training.MicrobatchSize(), site::VersioningOf(spec.training),
                                  OneWorkerOn(backend)));
  if (spec.has_teacher) {
    if (teacher_backend == nullptr) {
      return absl::InvalidArgumentError("a job with a teacher needs a backend for the teacher");
    }
    STRAIT_ASSIGN_OR_RETURN(
        t->teacher_stage_,
        LoadTeacherStage(t->spec_, {0, spec.teacher.model.NumLayers()},
                         spec.training.MicrobatchSize(), OneWorkerOn(teacher_backend)));
    t->teacher_ = std::make_unique<LocalTeacher>(t->spec_, *t->teacher_stage_);
  }
  return t;
}

Trainer::Trainer(const JobSpec& spec, Dataset train, Dataset test)
    : spec_(spec),
      train_(std::move(train)),
      test_(std::move(test)),
      sampler_(spec.data.seed, train_.size, spec.training.global_batch) {}

Trainer::~Trainer() = default;

int64_t Trainer::total_steps() const {
  return spec_.training.steps > 0 ? spec_.training.steps
                                  : int64_t{spec_.training.epochs} * steps_per_epoch();
}

absl::Status Trainer::Gather(const Dataset& data, const int64_t* indices, int n) {
  return GatherSamples(data, indices, n, &inputs_, &labels_);
}

absl::StatusOr<StepStats> Trainer::Step() {
  const TrainingSpec& t = spec_.training;
  const int mb = t.MicrobatchSize();
  const std::vector<int64_t>& batch = sampler_.Batch(step_);
  StepStats stats;
  stats.step = step_;
  int64_t correct = 0;
  // The loss is the mean over the step's targets (tokens, for a language model).
  const int64_t targets = int64_t{t.global_batch} * spec_.model.TargetsPerSample();
  stage_->ZeroGrad(step_);
  for (int m = 0; m < t.microbatches; ++m) {
    STRAIT_RETURN_IF_ERROR(Gather(train_, batch.data() + int64_t{m} * mb, mb));
    STRAIT_RETURN_IF_ERROR(
        stage_->Forward(step_, m, mb, inputs_.data(), nullptr, WeightsOfSites(m)));
    STRAIT_ASSIGN_OR_RETURN(LossResult loss, MicrobatchLoss(m, 1.0f / static_cast<float>(targets)));
    STRAIT_RETURN_IF_ERROR(stage_->Backward(m, nullptr, nullptr, m == t.microbatches - 1));
    stats.loss += loss.loss_sum;
    correct += loss.correct;
  }
  stats.loss /= static_cast<double>(targets);
  stats.accuracy = static_cast<double>(correct) / static_cast<double>(targets);
  // Dropped stale gradients: each site's layers take the mean over the microbatches they kept.
  const int stages = static_cast<int>(spec_.sites.size());
  for (int site = 0; site < stages; ++site) {
    const float kept = KeptGradientScale(t, stages, site, step_);
    if (kept != 1.0f) {
      STRAIT_RETURN_IF_ERROR(stage_->ScaleGrads(step_, spec_.sites[site].layers, kept));
    }
  }
  // Tied embeddings: both copies take g_embed + g_head, as the two sites of a federation sum them.
  STRAIT_RETURN_IF_ERROR(stage_->TieLocalGrads(step_));
  float scale = 1.0f;
  if (t.grad_clip > 0.0) {
    STRAIT_ASSIGN_OR_RETURN(double sum_squares, stage_->GradSumSquares(0.0, step_));
    scale = GlobalNormClipScale(sum_squares, t.grad_clip);
    if (LaggedClip(t)) {  // This step applies the last step's scale and keeps its own.
      const float newest = scale;
      scale = stage_->lagged_clip_scale();
      stage_->set_lagged_clip_scale(newest);
    }
  }
  // 2bw: L_{step+1} = Opt(L_step, clip(g_step)); the stage keeps L_step for the next step.
  STRAIT_RETURN_IF_ERROR(stage_->OptimizerStep(step_ + 1, scale));
  ++step_;
  return stats;
}

absl::StatusOr<LossResult> Trainer::MicrobatchLoss(int m, float grad_scale) {
  if (teacher_ == nullptr) return stage_->Loss(m, labels_.data(), grad_scale);
  const int mb = spec_.training.MicrobatchSize();
  STRAIT_ASSIGN_OR_RETURN(const TeacherTargets said, teacher_->Targets(step_, mb, inputs_.data()));
  STRAIT_ASSIGN_OR_RETURN(const TeacherTargets heard,
                          AsReceived(said, spec_.teacher.values, spec_.model.Classes()));
  return stage_->DistillLoss(m, labels_.data(), heard, DistillTermsOf(spec_.training.distill),
                             grad_scale);
}

site::ForwardOptions Trainer::WeightsOfSites(int microbatch) const {
  const int stages = static_cast<int>(spec_.sites.size());
  site::ForwardOptions options;
  options.weights = ForwardWeights(spec_.training, stages, 0, step_, microbatch);
  for (int s = 1; s < stages; ++s) {
    if (ForwardWeights(spec_.training, stages, s, step_, microbatch) == options.weights) {
      continue;
    }
    // The sites differ (2bw with update eager: a later site has already applied the update that
    // an earlier one has not): each site's layers get that site's version.
    options.layer_weights.resize(spec_.model.NumLayers());
    for (int site = 0; site < stages; ++site) {
      const LayerRange layers = spec_.sites[site].layers;
      std::fill(options.layer_weights.begin() + layers.start,
                options.layer_weights.begin() + layers.end,
                ForwardWeights(spec_.training, stages, site, step_, microbatch));
    }
    break;
  }
  return options;
}

absl::StatusOr<Evaluation> Trainer::Evaluate() {
  std::vector<int64_t> indices(test_.size);
  std::iota(indices.begin(), indices.end(), 0);
  LossResult sum;
  for (int64_t begin = 0; begin < test_.size; begin += stage_->max_batch()) {
    const int n = static_cast<int>(std::min<int64_t>(stage_->max_batch(), test_.size - begin));
    STRAIT_RETURN_IF_ERROR(Gather(test_, indices.data() + begin, n));
    STRAIT_RETURN_IF_ERROR(
        stage_->Forward(step_, 0, n, inputs_.data(), nullptr, {.training = false}));
    absl::StatusOr<LossResult> loss = stage_->Loss(0, labels_.data(), 0.0f);
    stage_->Discard(0);
    if (!loss.ok()) return loss.status();
    sum.loss_sum += loss->loss_sum;
    sum.correct += loss->correct;
  }
  Evaluation e =
      MeanOverTargets(sum.loss_sum, sum.correct, static_cast<double>(test_.size) * test_.targets);
  e.bytes_per_token = test_.bytes_per_token;
  return e;
}

absl::Status Trainer::SaveCheckpoint(const std::string& path) {
  return site::SaveStageCheckpoint(path, spec_, *stage_, step_);
}

absl::Status Trainer::LoadCheckpoint(const std::string& path) {
  STRAIT_ASSIGN_OR_RETURN(step_, site::LoadStageCheckpoint(path, spec_, *stage_));
  return absl::OkStatus();
}

}  // namespace strait::site
