// One site's part of federated training (DESIGN.md §4): runs its stage's forward and backward
// passes in the order of the pipeline schedule, takes its inputs from the previous stage (or the
// data set) and its output gradients from the next stage (or the loss), sends what its neighbours
// need, adds up the global gradient norm across stages, and steps the optimizer: the same
// arithmetic, in the same order, as `strait train` on the whole model, so lossless links give the
// same bits.
//
// The schedule's ops come from StepOps (core/schedule.h). With 1f1b and gpipe a step ends
// with a flush: clipping norm, scale, update. With 2bw the stream runs across steps: Step(t) runs
// the pairs whose backward belongs to step t (and forwards of step t+1), sends the norm of g_t when
// its last backward is done, and applies g_{t-1} (making L_t) right before its first forward of
// step t+1; the scale of g_{t-1} travels ahead of that forward's activations on the same link.
// The last step also applies its own gradient, so a run ends with the weights L_T.
//
// At the schedule's step-end ops the runner calls its collaborators, each the owner of one
// protocol: ClipNormRelay (the global norm upstream, the clipping scale downstream), and before the
// norm TiedGradientExchange (tied embeddings' gradients between the first and the last stage) and
// ReplicaMeans (with training.sync every_step, the replicas' mean gradient); OuterRounds (DiLoCo)
// after the updates that end a round.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "core/schedule.h"
#include "site/data/dataset.h"
#include "site/data/sampler.h"
#include "site/nn/evaluation.h"
#include "site/pipeline/clip_norm_relay.h"
#include "site/pipeline/generation_runner.h"
#include "site/pipeline/outer_rounds.h"
#include "site/pipeline/replica_means.h"
#include "site/pipeline/site_metrics.h"
#include "site/pipeline/stage_executor.h"
#include "site/pipeline/stage_frames.h"
#include "site/pipeline/tied_gradient_exchange.h"

namespace strait::site {

class SiteRunner : public GenerationRunner {
 public:
  // Stage `index` of `spec` with `stage` (its workers, built for its layers and microbatch size,
  // holding the state after steps.start_step steps), links and data as above. `stage`, `metrics`
  // and `spec` must outlive the runner.
  SiteRunner(const JobSpec& spec, int index, StageExecutor& stage, StageIo io, SiteMetrics& metrics,
             StepRange steps);

  int64_t step() const override { return step_; }  // Steps completed.
  // Optimizer updates applied: the stage holds the weights L_updates(). step() with 1f1b, gpipe
  // and 2bw with eager updates; with deferred 2bw one less (the update of the last completed
  // step's gradient is still to come), except after the last step. A checkpoint of step updates()
  // taken between steps resumes bit-identically: with 2bw the stage then holds L_{k-1} and L_k,
  // exactly what a run resumed at step k needs, and no gradient that the checkpoint lacks is
  // pending.
  int64_t updates() const override { return updates_; }

  // One global step: the schedule's forwards and backwards, clipping, optimizer update(s)
  // (StepOps). Blocks on the neighbours. An error (a refused frame, the gateway gone) leaves the
  // runner unusable. Announces the next step's frames to the receivers ahead (so their pulls wait
  // at the gateway), unless `then_evaluate`: Evaluate() comes next (1f1b and gpipe only; 2bw's step
  // runs the next step's first forwards), and a receiver takes frames in the order announced.
  absl::StatusOr<StepResult> Step(bool then_evaluate = false) override;

  // Loss and accuracy on the test split, evaluated through the whole pipeline (dropout off);
  // returned on the last stage, nullopt elsewhere. Does not change the model, the data order or
  // anything random (dropout masks are keyed by step and microbatch). Call between steps with
  // nothing in flight, at the same step on every stage: before the first step, after
  // Step(/*then_evaluate=*/true) or after the last step (FailedPrecondition otherwise). Its frames'
  // keys have purpose EVAL and the step count step(), so they are distinct per evaluation.
  absl::StatusOr<std::optional<Evaluation>> Evaluate() override;

  // sync outer: what the outer rounds carry from one to the next (the outer optimizer's momentum,
  // this replica's error feedback, the last round's mean), for checkpoints taken between steps at
  // a round's end; and its restoration when a generation resumes from one (before the first
  // Step). Nullopt / FAILED_PRECONDITION without outer rounds.
  std::optional<std::vector<float>> OuterState() const override;
  bool has_outer_rounds() const { return outer_ != nullptr; }
  absl::Status SetOuterState(std::span<const float> state);

  // Blocks until the gateway holds everything this stage sent.
  absl::Status Flush() override;

  // Makes waiting receivers and senders fail with `status` (the gateway stopped or paused the job),
  // so that Step returns. Thread-safe.
  void Abort(const absl::Status& status) override;

 private:
  // The tallies of a step on the last stage.
  struct StepTally {
    double loss_sum = 0.0;
    int64_t correct = 0;
  };
  v1::TensorKey Key(int64_t step, int microbatch, int boundary, v1::Direction direction,
                    v1::Purpose purpose = v1::TRAIN) const {
    return frames_.Key(step, microbatch, boundary, direction, purpose);
  }
  // Announces the frames of `step` to the receivers, in the order the ops take them.
  void ExpectStep(int64_t step);
  absl::Status RunForward(int64_t step, int microbatch, StepTally& tally);
  // The last stage's loss of a microbatch after its forward pass (counted as forward compute):
  // against the labels, and with a teacher against the targets its last stage sent (TEACH key
  // TeacherKey; the wait for them is no compute), then the teacher's pace after the last one.
  absl::StatusOr<LossResult> MicrobatchLoss(int64_t step, int microbatch, float grad_scale);
  v1::TensorKey TeacherKey(int64_t step, int microbatch) const;
  absl::Status RunBackward(int64_t step, int microbatch);
  // kClipNorm: the collaborators' parts, in their order.
  absl::Status EndBackwards(int64_t step);
  // kClipNorm, first: with dropped stale gradients, the gradient of `step` becomes the mean over
  // the microbatches kept (schedule.h KeptGradientScale).
  absl::Status KeepFreshGrads(int64_t step);
  // kUpdate: takes the first stage's tied gradient (last stage) and the clipping scale of `step`'s
  // gradient, and applies it.
  absl::Status Update(int64_t step);
  // Copies inputs (first stage) and labels (last stage) of samples indices[0, n) of `data`; fails
  // for a damaged token shard (GatherSamples).
  absl::Status Gather(const Dataset& data, const int64_t* indices, int n);

  const JobSpec& spec_;
  const int index_;
  StageExecutor& stage_;
  StageFrames frames_;
  StageData data_;
  SiteMetrics& metrics_;
  const StepRange steps_;
  const int microbatch_size_;
  ClipNormRelay clip_;
  TiedGradientExchange tied_;
  ReplicaMeans means_;
  std::unique_ptr<OuterRounds> outer_;  // sync outer only.
  std::optional<Sampler> sampler_;
  int64_t step_;
  int64_t updates_;
  int64_t outer_through_;     // Updates the outer rounds have followed (OuterRounds::AfterStep).
  int64_t expected_through_;  // Last step whose frames were announced to the receivers.
  std::vector<float> inputs_;
  std::vector<int32_t> labels_;
};

}  // namespace strait::site
