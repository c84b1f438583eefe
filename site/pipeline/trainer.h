// Single-process training of a whole model: the reference that `strait train` runs and that every
// federated run is compared against. Uses exactly the federation's microbatching, data order,
// loss scaling, clipping and optimizer step (see Stage), so a federation with lossless codecs
// reproduces its bits. With schedule 2bw, step t computes with the weights L_{t-1} and updates the
// newest L_t into L_{t+1} (site/pipeline/weight_history.h): the one-step-stale semantics of the
// federation's 2bw, in one process and without its pipelining. With 2bw and update eager each
// site's layers compute a microbatch with the weights that site's stage uses for it
// (core/schedule.h ForwardWeights), so the split and the warm-up matter here too.
// The model runs through the same StageExecutor as a site's stage, with one worker.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/backend/backend.h"
#include "site/data/dataset.h"
#include "site/data/sampler.h"
#include "site/nn/evaluation.h"
#include "site/pipeline/local_teacher.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {

struct StepStats {
  int64_t step = 0;       // The step just taken (0-based).
  double loss = 0.0;      // Mean cross-entropy over the global batch (before the update).
  double accuracy = 0.0;  // Fraction of the global batch classified correctly.
};

class Trainer {
 public:
  // Loads the training and test data and builds all layers of spec.model on `backend` (one
  // worker). A job with a teacher runs the whole teacher on `teacher_backend` (required then), and
  // the loss is the distillation loss against its targets as they cross the wire
  // (teacher_targets_codec.h AsReceived), so that a lossless federation equals this run.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const JobSpec& spec, std::unique_ptr<Backend> backend,
      std::unique_ptr<Backend> teacher_backend = nullptr);
  ~Trainer();

  int64_t steps_per_epoch() const { return sampler_.BatchesPerEpoch(); }
  // training.steps, or training.epochs * steps_per_epoch().
  int64_t total_steps() const;
  int64_t step() const { return step_; }  // Steps completed.
  site::StageExecutor& stage() { return *stage_; }

  // One global step: M microbatches forward + loss + backward, clipping, optimizer update.
  // Afterwards stage().Params() are L_{step()}.
  absl::StatusOr<StepStats> Step();

  // Loss and accuracy on the test (held-out) split, dropout off. Does not change the model.
  absl::StatusOr<Evaluation> Evaluate();

  absl::Status SaveCheckpoint(const std::string& path);
  // Restores parameters, optimizer state and step; the file must come from the same model, layers,
  // optimizer and seeds (FailedPrecondition otherwise).
  absl::Status LoadCheckpoint(const std::string& path);

 private:
  Trainer(const JobSpec& spec, Dataset train, Dataset test);
  // Copies the inputs and labels of samples indices[0, n) into inputs_ / labels_.
  absl::Status Gather(const Dataset& data, const int64_t* indices, int n);
  // The loss of microbatch `m` (its inputs and labels gathered), against the teacher's targets
  // when there is one.
  absl::StatusOr<LossResult> MicrobatchLoss(int m, float grad_scale);
  // The weights the sites' stages compute microbatch `microbatch` of this step with: one version
  // for all layers, or (2bw with update eager, when the sites differ) each site's for its layers.
  site::ForwardOptions WeightsOfSites(int microbatch) const;

  JobSpec spec_;
  Dataset train_, test_;
  Sampler sampler_;
  std::unique_ptr<site::StageExecutor> stage_;
  std::unique_ptr<StageExecutor> teacher_stage_;  // With a teacher only: its whole model,
  std::unique_ptr<LocalTeacher> teacher_;         // run here.
  int64_t step_ = 0;
  std::vector<float> inputs_;
  std::vector<int32_t> labels_;
};

}  // namespace strait::site
