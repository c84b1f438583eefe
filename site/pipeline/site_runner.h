// One site's part of federated training (DESIGN.md §4): runs its stage's forward and backward
// passes in the order of the pipeline schedule, takes its inputs from the previous stage (or the
// data set) and its output gradients from the next stage (or the loss), sends what its neighbours
// need, adds up the global gradient norm across stages, and steps the optimizer: the same
// arithmetic, in the same order, as `strait train` on the whole model, so lossless links give the
// same bits.
//
// Global-norm clipping rides on the links: after a step's last backward pass, stage i receives the
// sum of squares of stages i+1..S-1, adds its own (GradSumSquares chains last to first) and sends
// the total back; stage 0 turns it into the clip scale, which travels forward stage by stage, each
// stage taking and relaying it right before its update. Both are CLIP-purpose frames, sealed like
// the tensors and never lossy.
//
// The schedule's ops come from StepOps (core/schedule.h). With 1f1b and gpipe a step ends
// with a flush: clipping norm, scale, update. With 2bw the stream runs across steps: Step(t) runs
// the pairs whose backward belongs to step t (and forwards of step t+1), sends the norm of g_t when
// its last backward is done, and applies g_{t-1} (making L_t) right before its first forward of
// step t+1; the scale of g_{t-1} travels ahead of that forward's activations on the same link.
// The last step also applies its own gradient, so a run ends with the weights L_T.
//
// Replicas (JobSpec::replicas) with training.sync every_step: at kClipNorm, before the norm, the
// stage's gradient becomes the mean of its replicas' (SumOverReplicas), so every replica takes the
// update of one pipeline with R times the batch.
//
// With training.sync outer (DiLoCo), replicas train apart and, after every outer.every-th step's
// update and after the last, average their pseudo-gradients (the round's start minus now) through
// the same sums; each applies the outer optimizer (site/nn/outer_optimizer.h) to the start, so all
// replicas begin the next round from the same parameters.
//
// Tied embeddings (core/tied_embeddings.h): at kClipNorm the first and the last stage each send
// the other their gradient of the shared matrix; the first stage adds the last's right away (its
// part of the norm counts the sum), the last stage adds the first's at kUpdate, before the scale.
#pragma once

#include <cstdint>
#include <map>
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
#include "site/exchange/masked_sum.h"
#include "site/nn/evaluation.h"
#include "site/nn/outer_optimizer.h"
#include "site/pipeline/frame_receiver.h"
#include "site/pipeline/frame_sender.h"
#include "site/pipeline/site_metrics.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {

// The four link directions of a stage; the ones that do not exist (first / last stage) are null.
struct StageLinks {
  std::unique_ptr<FrameReceiver> forward_in;   // Activations from stage i-1.
  std::unique_ptr<FrameSender> backward_out;   // Their gradients, to stage i-1.
  std::unique_ptr<FrameSender> forward_out;    // Activations to stage i+1.
  std::unique_ptr<FrameReceiver> backward_in;  // Their gradients, from stage i+1.
  // Tied embeddings across three stages or more (core/tied_embeddings.h), first and last stage
  // only: the link with the other end. Null otherwise (two stages: the TIED frames ride on the
  // neighbours' link).
  std::unique_ptr<FrameSender> tied_out;
  std::unique_ptr<FrameReceiver> tied_in;
  // Replicas (JobSpec::replicas): the secure sums of this stage's replicas through the gateway
  // (proto Purpose SUM): masked vectors out, sums in; `mask` adds this replica's pairwise masks of
  // a round (crypto/pairwise_masks.h; each round's label unique). Null without replicas.
  std::unique_ptr<FrameSender> sum_out;
  std::unique_ptr<FrameReceiver> sum_in;
  std::function<absl::Status(absl::string_view round, std::span<uint32_t> words)> mask;
};

// What the stage's own data holds: the first stage reads inputs, the last stage labels; a middle
// stage needs only the test split's size (to follow the evaluation batches). Shared, read-only: a
// site keeps one copy across the runners of successive rollback generations.
struct StageData {
  std::shared_ptr<const Dataset> train, test;  // Set on the first and the last stage.
  int64_t test_size = 0;
};

struct StepResult {
  int64_t step = 0;                // The step just taken (0-based).
  std::optional<double> loss;      // Mean cross-entropy over the global batch (last stage).
  std::optional<double> accuracy;  // Fraction of the batch classified correctly (last stage).
  // Of the step's time, the part that is the pipeline's drain rather than its steady state: with
  // deferred 2bw, the last step's update of its own gradient (with clipping it waits for a scale
  // that travels the whole chain and back). 0 in every other step.
  double drain_s = 0;
};

class SiteRunner {
 public:
  // Stage `index` of `spec` with `stage` (its workers, built for its layers and microbatch size,
  // holding the state after `start_step` steps), links and data as above. `stage`,
  // `metrics` and `spec` must outlive the runner. `total_steps`: how far the run goes (frames are
  // announced one step ahead, never beyond it). `generation`: the federation's rollback generation,
  // part of every tensor key.
  SiteRunner(const JobSpec& spec, int index, StageExecutor& stage, StageLinks links, StageData data,
             SiteMetrics& metrics, int64_t total_steps, int64_t start_step = 0,
             uint32_t generation = 0);

  int64_t step() const { return step_; }  // Steps completed.
  // Optimizer updates applied: the stage holds the weights L_updates(). step() with 1f1b, gpipe
  // and 2bw with eager updates; with deferred 2bw one less (the update of the last completed
  // step's gradient is still to come), except after the last step. A checkpoint of step updates()
  // taken between steps resumes bit-identically: with 2bw the stage then holds L_{k-1} and L_k,
  // exactly what a run resumed at step k needs, and no gradient that the checkpoint lacks is
  // pending.
  int64_t updates() const { return updates_; }

  // One global step: the schedule's forwards and backwards, clipping, optimizer update(s)
  // (StepOps). Blocks on the neighbours. An error (a refused frame, the gateway gone) leaves the
  // runner unusable. Announces the next step's frames to the receivers ahead (so their pulls wait
  // at the gateway), unless `then_evaluate`: Evaluate() comes next (1f1b and gpipe only; 2bw's step
  // runs the next step's first forwards), and a receiver takes frames in the order announced.
  absl::StatusOr<StepResult> Step(bool then_evaluate = false);

  // Loss and accuracy on the test split, evaluated through the whole pipeline (dropout off);
  // returned on the last stage, nullopt elsewhere. Does not change the model, the data order or
  // anything random (dropout masks are keyed by step and microbatch). Call between steps with
  // nothing in flight, at the same step on every stage: before the first step, after
  // Step(/*then_evaluate=*/true) or after the last step (FailedPrecondition otherwise). Its frames'
  // keys have purpose EVAL and the step count step(), so they are distinct per evaluation.
  absl::StatusOr<std::optional<Evaluation>> Evaluate();

  // sync outer: what the outer rounds carry from one to the next (the outer optimizer's momentum,
  // this replica's error feedback, the last round's mean), for checkpoints taken between steps at
  // a round's end; and its restoration when a generation resumes from one (before the first
  // Step). Nullopt / FAILED_PRECONDITION without outer rounds.
  std::optional<std::vector<float>> OuterState() const;
  bool has_outer_rounds() const { return outer_.has_value(); }
  absl::Status SetOuterState(std::span<const float> state);

  // Blocks until the gateway holds everything this stage sent.
  absl::Status Flush();

  // Makes waiting receivers and senders fail with `status` (the gateway stopped or paused the job),
  // so that Step returns. Thread-safe.
  void Abort(const absl::Status& status);

 private:
  v1::TensorKey Key(int64_t step, int microbatch, int boundary, v1::Direction direction,
                    v1::Purpose purpose = v1::TRAIN) const;
  // The tallies of a step on the last stage.
  struct StepTally {
    double loss_sum = 0.0;
    int64_t correct = 0;
  };
  // Announces the frames of `step` to the receivers, in the order the ops take them.
  void ExpectStep(int64_t step);
  absl::Status RunForward(int64_t step, int microbatch, StepTally& tally);
  absl::Status RunBackward(int64_t step, int microbatch);
  // kClipNorm: this stage's part of the clipping norm of `step`'s gradient goes upstream; on the
  // first stage it becomes the scale.
  absl::Status SendNorm(int64_t step);
  // Before the forward of step's last microbatch, with LaggedClip: the first stage takes the scale
  // of the last step's norm, the others receive it from upstream; each passes it downstream (in
  // front of the microbatch) and keeps it for the step's update.
  absl::Status PassLaggedScale(int64_t step);
  // kClipNorm, first: with dropped stale gradients, the gradient of `step` becomes the mean over
  // the microbatches kept (schedule.h KeptGradientScale).
  absl::Status KeepFreshGrads(int64_t step);
  // kClipNorm, before SendNorm: the tied-embedding exchange's first half (see above).
  absl::Status ShareTiedGrad(int64_t step);
  // The link of the TIED frames: the stages' own, or the neighbours' with two stages.
  FrameSender& TiedOut() const;
  FrameReceiver& TiedIn() const;
  v1::TensorKey TiedKey(int64_t step, bool from_first) const;
  std::vector<int64_t> TiedShape() const;  // [vocab, dim]
  // kClipNorm with replicas summing every step: the gradient becomes the replicas' mean.
  absl::Status AverageReplicaGrads(int64_t step);
  // The mean of `values` over this stage's replicas, through the gateway's secure sum: fixed point
  // of `format` (site/exchange/masked_sum.h), masked, summed, back to floats / R. `round` names it
  // among all rounds of the run (its masks must never repeat). `own`, if given, receives what this
  // replica's share stands for after quantisation.
  absl::StatusOr<std::vector<float>> MeanOverReplicas(const std::string& what, int64_t round,
                                                      std::vector<float> values,
                                                      const SumFormat& format,
                                                      std::vector<float>* own = nullptr);
  // sync outer, after the update that completes `steps_done` steps: an outer round when one is
  // due (every outer.every steps and after the last).
  absl::Status MaybeOuterRound(int64_t steps_done);
  // kUpdate: takes (and relays downstream) the clipping scale of `step`'s gradient and applies it.
  absl::Status Update(int64_t step);
  absl::StatusOr<std::vector<float>> Receive(FrameReceiver& from, const v1::TensorKey& key);
  absl::Status SendTo(FrameSender& to, const v1::TensorKey& key, std::vector<float> values,
                      std::vector<int64_t> shape);
  // Copies inputs (first stage) and labels (last stage) of samples indices[0, n) of `data`.
  void Gather(const Dataset& data, const int64_t* indices, int n);

  const JobSpec& spec_;
  const int index_;
  StageExecutor& stage_;
  StageLinks links_;
  StageData data_;
  SiteMetrics& metrics_;
  const int64_t total_steps_;
  const int64_t first_step_;
  const uint32_t generation_;
  const int microbatch_size_;
  const bool tied_across_;  // The first and the last stage exchange tied gradients.
  int64_t clamped_ = 0;     // Values the secure sums clamped to the fixed point's range.
  std::optional<OuterOptimizer> outer_;  // sync outer only.
  std::vector<float> outer_start_;       // The parameters the current outer round started from.
  std::vector<float> outer_residual_;    // Error feedback: what quantisation left of the deltas.
  std::vector<float> outer_last_mean_;   // The last round's mean delta (its scales: masked_sum.h).
  std::optional<Sampler> sampler_;
  int64_t step_;
  int64_t updates_;
  // Clipping scales not yet applied, by step: the first stage's, or with LaggedClip every stage's.
  std::map<int64_t, float> scales_;
  int64_t expected_through_;  // Last step whose frames were announced to the receivers.
  std::vector<float> inputs_;
  std::vector<int32_t> labels_;
};

}  // namespace strait::site
