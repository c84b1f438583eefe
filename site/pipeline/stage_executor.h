// A site's pipeline stage: the one interface through which the site daemon (SiteRunner,
// SiteSession, CheckpointStore), `strait train` (Trainer), the checkpoint code and the benchmarks
// train layers [a, b) of a model (DESIGN.md §3, §4; docs/architecture.md tells how its parts fit).
// Create makes one process's workers (LocalExecutor) or, on the leader of a site of several
// ranks, those wrapped in the mirroring of every call to the followers (RankMirror); a follower
// rank's stage is a FollowerStage. Inputs and outputs are whole microbatches: host floats, or on a
// stage of one worker and one rank the payload of a link codec's value stage (site/nn/boundary.h),
// which the backend encodes and decodes where the tensor lives.
// Not thread-safe: one thread drives a StageExecutor, and every call blocks until it is done.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/job_spec.h"
#include "site/backend/backend.h"
#include "site/nn/boundary.h"
#include "site/pipeline/gradient_buckets.h"
#include "site/pipeline/rank_call.h"
#include "site/pipeline/stage_state.h"
#include "site/pipeline/weight_history.h"

namespace strait::site {

// Makes worker w's backend; called on the thread that will drive that worker (a CUDA backend's
// device becomes current there).
using BackendMaker = std::function<absl::StatusOr<std::unique_ptr<Backend>>(int worker)>;

// Where a stage's boundary tensors meet the link codecs' value stages (StageShape::
// boundary_payloads): on the backend (a GPU copies the codec's bytes, not f32), on the host (the
// sender's thread encodes floats), or kAuto: on the backend for CUDA, where the copy is what it
// saves, on the host for the CPU, where the sender's thread overlaps the encoding with compute.
enum class BoundaryCodecs { kAuto, kHost, kBackend };

// The workers of a stage.
struct StageWorkers {
  DeviceKind device = DeviceKind::kCpu;
  int count = 1;    // W >= 1.
  int threads = 1;  // CPU threads of each worker's backend (fixed: deterministic).
  Precision precision = Precision::kFp32;  // Of the backends' matrix products.
  // Optional: makes the backends instead of CreateBackend(device, {threads, w}) (`strait train`
  // hands over the backend it made; a benchmark wraps one to record its calls).
  BackendMaker make_backend;
  // Optional: the gradient reduction instead of InProcessReducer(device). A site of several
  // ranks gives the cross-rank one (it also runs for count = 1).
  ReducerMaker make_reducer;
  // A site of several ranks: this process is rank `rank` of `ranks` (row_split.h SiteRows).
  int rank = 0;
  int ranks = 1;
  // The leader (rank 0 of ranks > 1): the followers, which mirror its calls. Not owned; must
  // outlive the executor.
  RankPeers* peers = nullptr;
  // Tensor parallelism (core/tensor_split.h): rank r is tensor rank r % tensor_parallel of the
  // data-parallel replica r / tensor_parallel; its one worker holds that tensor rank's shards and
  // sums partial results with `tensor_reducer` (its replica's ranks; not owned). The getters and
  // setters of the leader take and give whole parameters (tensor_shards.h).
  int tensor_parallel = 1;
  TensorReducer* tensor_reducer = nullptr;
  // Honoured by a stage of one worker on a site of one rank (a payload is a whole microbatch's);
  // every other stage takes host floats.
  BoundaryCodecs boundary_codecs = BoundaryCodecs::kAuto;
};

// What a Forward computes with, besides its input.
struct ForwardOptions {
  bool training = true;  // false disables dropout (evaluation).
  // The weights L_k to compute with (core/schedule.h ForwardWeights): the newest or,
  // with two versions, the previous one (FailedPrecondition otherwise); kNewestWeights: the newest.
  int64_t weights = kNewestWeights;
  // Optional, one per layer of the stage, in place of `weights`: layer i computes with
  // L_{layer_weights[i]} (each held as above). `strait train` runs each site's layers with the
  // version that site's stage uses for the microbatch (2bw with update eager).
  std::vector<int64_t> layer_weights;
  // Added to the microbatch's index in its dropout masks' key: a replica's (JobSpec::replicas)
  // microbatches then draw the masks of the one-pipeline equivalent's (replica r of R holds its
  // microbatches r * M .. r * M + M - 1). Sites of one rank only (replicas take no more).
  int dropout_microbatch_offset = 0;
};

// What a stage is, fixed when it is made (StageExecutor's getters).
struct StageShape {
  LayerRange range;
  bool is_last = false;
  int64_t input_features = 0;   // Floats per sample in.
  int64_t output_features = 0;  // Floats per sample out.
  int64_t param_count = 0;      // Of the whole layers.
  int max_batch = 0;
  // Bytes one microbatch in flight keeps on this process's workers together.
  int64_t bytes_per_microbatch = 0;
  int workers = 0;  // This process's.
  int weight_versions = 1;
  float lookahead = 0;
  // Hash of the family and the layouts of the stage's layers (Stage::Fingerprint): checkpoints of
  // a different model or split do not load.
  uint64_t fingerprint = 0;
  std::string device_names;  // The workers' backends, e.g. "cpu (1 threads), cpu (1 threads)".
  // Forward and Backward take and give value payloads (StageWorkers::boundary_codecs); a caller
  // that holds one for a stage without this decodes it on the host.
  bool boundary_payloads = false;
};

// A training step s of M microbatches: ZeroGrad(s); Forward(s, m, ...) for each microbatch in the
// schedule's order (on the last stage Loss(m, labels, 1 / global_batch) right after it);
// Backward(m, ..., last_of_step = m == M - 1) for m = 0 .. M-1 in this order; norm^2 =
// GradSumSquares(downstream, s) chained from the last stage to the first; OptimizerStep(s + 1,
// scale). Same workers, same bits on every run; with W = 1 the bits of one Stage.
class StageExecutor {
 public:
  // Layers `range` of `model` on `workers`, microbatches of at most `max_batch` samples, weights
  // versioned as `versioning` (VersioningOf(training)). Makes the backends (default CUDA: devices
  // 0 .. W-1; an error when there are fewer), the stages, histories, optimizers and reductions.
  // For rank 0 only (a follower rank's stage is a FollowerStage).
  static absl::StatusOr<std::unique_ptr<StageExecutor>> Create(
      const ModelSpec& model, LayerRange range, const OptimizerSpec& optimizer, int max_batch,
      WeightVersioning versioning, const StageWorkers& workers);
  virtual ~StageExecutor() = default;
  StageExecutor(const StageExecutor&) = delete;
  StageExecutor& operator=(const StageExecutor&) = delete;

  LayerRange range() const { return shape_.range; }
  bool is_first() const { return range().start == 0; }
  bool is_last() const { return shape_.is_last; }
  int64_t input_features() const { return shape_.input_features; }
  int64_t output_features() const { return shape_.output_features; }
  int64_t param_count() const { return shape_.param_count; }
  int max_batch() const { return shape_.max_batch; }
  int64_t bytes_per_microbatch() const { return shape_.bytes_per_microbatch; }
  int workers() const { return shape_.workers; }
  int weight_versions() const { return shape_.weight_versions; }
  float lookahead() const { return shape_.lookahead; }
  uint64_t Fingerprint() const { return shape_.fingerprint; }
  std::string device_names() const { return shape_.device_names; }
  bool boundary_payloads() const { return shape_.boundary_payloads; }
  const StageShape& shape() const { return shape_; }
  // k of the newest weights L_k: the updates applied (counting those of a restored checkpoint).
  virtual int64_t weights_version() const = 0;

  // 2bw with update eager and grad_clip (schedule.h LaggedClip): the clipping scale of the newest
  // global norm, which the next update applies. The stage that computes the norm (the first, or
  // `strait train`'s only one) keeps it here so that its checkpoint carries it; 1 before any.
  float lagged_clip_scale() const { return lagged_clip_scale_; }
  void set_lagged_clip_scale(float scale) { lagged_clip_scale_ = scale; }

  // Runs microbatch `microbatch` of global step `step` (0-based): input [n, input_features()]
  // -> output [n, output_features()] (not copied when empty), 1 <= n <= max_batch(). A payload in
  // or out needs boundary_payloads() (FailedPrecondition otherwise). Keeps what Backward needs
  // until Backward or Discard.
  virtual absl::Status Forward(int64_t step, int microbatch, int n, const BoundaryIn& input,
                               const BoundaryOut& output, const ForwardOptions& options = {}) = 0;
  // Last stage only, after Forward(microbatch): softmax cross-entropy of its logits against labels
  // [n] (host), the workers' results summed in row order; keeps dLoss/dlogits = (softmax - onehot)
  // * grad_scale for Backward (grad_scale = 1 / global batch).
  virtual absl::StatusOr<LossResult> Loss(int microbatch, const int32_t* labels,
                                          float grad_scale) = 0;
  // Loss with a teacher (knowledge sharing, Stage::DistillLoss): `teacher` holds one row per target
  // of the microbatch. The same result as Loss; the gradient kept is the distillation loss's.
  // FAILED_PRECONDITION where the stage cannot take it (a site of several machines).
  virtual absl::StatusOr<LossResult> DistillLoss(int microbatch, const int32_t* labels,
                                                 const TeacherTargets& teacher,
                                                 const DistillTerms& terms, float grad_scale);
  // Backpropagates microbatch `microbatch`: grad_output [n, output_features()] (empty on the last
  // stage: Loss's gradient) -> grad_input [n, input_features()] (skipped when empty), with the
  // weights its Forward used. last_of_step: the step's last microbatch (every other one
  // backpropagated before), so the gradient reduction runs, overlapped with this pass, and is
  // complete on return. After an error the microbatch stays in flight (Discard drops it).
  virtual absl::Status Backward(int microbatch, const BoundaryIn& grad_output,
                                const BoundaryOut& grad_input, bool last_of_step) = 0;
  // Drops a microbatch's saved state without a backward pass (after evaluation).
  virtual void Discard(int microbatch) = 0;

  // Zeroes the gradient arena that accumulates the gradient of step `step` (with two weight
  // versions, the arena of step - 2, which must have been applied by then).
  virtual void ZeroGrad(int64_t step = 0) = 0;
  // `downstream` plus the sums of squares of the (reduced) gradient of step `step`, layer by layer
  // from the last to the first: stages chained from the last to the first add in the order of one
  // stage of all layers, so global-norm clipping across sites gives the bits of one process.
  virtual absl::StatusOr<double> GradSumSquares(double downstream = 0.0, int64_t step = 0) = 0;
  // Tied embeddings (core/tied_embeddings.h), on the reduced gradient of step `step`, before
  // GradSumSquares. TiedGrad: this stage's gradient of the tied matrix (of its first copy; host;
  // empty when it holds no copy). AddTiedGrad: adds `other` (the other end's TiedGrad) to every
  // copy on every worker. TieLocalGrads: a stage that holds both copies gives each their sum.
  virtual absl::StatusOr<std::vector<float>> TiedGrad(int64_t step) const = 0;
  virtual absl::Status AddTiedGrad(int64_t step, absl::Span<const float> other) = 0;
  virtual absl::Status TieLocalGrads(int64_t step) = 0;
  // Multiplies the (reduced) gradient of step `step` of layers `layers` (model indices inside
  // range()) by `factor` on every worker (schedule.h KeptGradientScale). InvalidArgument for
  // layers outside range().
  virtual absl::Status ScaleGrads(int64_t step, LayerRange layers, float factor) = 0;
  // Every worker applies the optimizer to the newest weights with the gradient of step `step` - 1
  // scaled by grad_scale (`step` counts updates from 1): the newest weights become L_step. With
  // two versions, FailedPrecondition (nothing changed) while a microbatch in flight computes with
  // the version the update drops.
  virtual absl::Status OptimizerStep(int64_t step, float grad_scale) = 0;

  // The checkpointed state (stage_state.h); the calls below are its.
  virtual const StageState& state() const = 0;
  virtual StageState& state() = 0;
  absl::StatusOr<std::vector<float>> Params() const { return state().Params(); }
  absl::StatusOr<std::vector<float>> PreviousParams() const { return state().PreviousParams(); }
  absl::StatusOr<std::vector<float>> LookaheadParams() const { return state().LookaheadParams(); }
  absl::StatusOr<std::vector<float>> Grads(int64_t step = 0) const { return state().Grads(step); }
  absl::StatusOr<std::vector<float>> OptimizerState() const { return state().OptimizerState(); }
  absl::Status SetParams(absl::Span<const float> params) { return state().SetParams(params); }
  absl::Status RestoreWeights(int64_t version, absl::Span<const float> newest,
                              absl::Span<const float> previous,
                              absl::Span<const float> lookahead = {}) {
    return state().RestoreWeights(version, newest, previous, lookahead);
  }
  absl::Status SetOptimizerState(absl::Span<const float> s) { return state().SetOptimizerState(s); }
  absl::Status SetGrads(int64_t step, absl::Span<const float> grads) {
    return state().SetGrads(step, grads);
  }

 protected:
  explicit StageExecutor(StageShape shape) : shape_(std::move(shape)) {}

 private:
  const StageShape shape_;
  float lagged_clip_scale_ = 1.0f;
};

}  // namespace strait::site
