// A site's pipeline stage on its local workers: the one interface through which the site daemon
// (SiteRunner, CheckpointStore), `strait train` (Trainer), checkpoints and the benchmarks train
// layers [a, b) of a model (DESIGN.md §3, §4).
//
// It owns W >= 1 workers. Each is a backend (CPU threads, or one CUDA device) with a Stage of the
// layers (the compute: site/nn/stage.h), a WeightHistory (the weight versions the schedule keeps,
// and the gradient arenas: site/pipeline/weight_history.h) and an Optimizer. A microbatch is
// split by rows across the workers (RowSplit); every worker computes its rows with its own copy
// of the same weights; during the backward pass of a step's last microbatch the gradients are
// summed across the workers (bucketed per layer, overlapped with that pass:
// site/collective/all_reducer.h), then every worker applies the same update, so the copies stay
// identical. W = 1 runs the same code: its one worker runs on the caller's thread and the
// reduction of one worker is none.
//
// Training step s with M microbatches:
//   ZeroGrad(s);
//   for each microbatch m, in the schedule's order: Forward(s, m, ...) with the weights the
//     schedule says (core/schedule.h ForwardWeights); on the last stage Loss(m, labels,
//     1 / global_batch) right after it;
//   Backward(m, ..., last_of_step = m == M - 1) for m = 0 .. M-1 in this order (so gradients sum
//     in the same order as one process accumulating them);
//   norm^2 = GradSumSquares(downstream, s) chained from the last stage to the first; scale =
//     clip / max(norm, clip) or 1;
//   OptimizerStep(s + 1, scale).
// Under 2bw the steps overlap (site/pipeline/site_runner.h); a microbatch's Backward uses the
// weights its Forward used even when an update came in between.
//
// Numerics: with W = 1 the bits are those of one Stage computing the whole microbatch; with W > 1
// they equal it up to the order of float sums (rows split across GEMMs, the gradient sum across
// workers): dropout masks are the whole microbatch's whatever the split (PassOptions::first_row).
// Same W, same bits on every run. Everything random is keyed (init: (init_seed, layer, param);
// dropout: (init_seed, step, microbatch, layer)), so any split of the model and any schedule give
// the same bits.
//
// Sites that span several machines (DESIGN.md §4: ranks across processes, Gloo or NCCL between
// them) plug in here without changing the callers:
//   * Rows: RowSplit is the one place that divides a microbatch. A site of R ranks of W workers
//     each divides it into R * W parts, rank r's workers taking parts r * W .. r * W + W - 1.
//   * The leader's executor mirrors every call that computes or changes state to the followers
//     (StageWorkers::peers, site/pipeline/rank_call.h), scattering their rows of inputs, labels and
//     gradients and gathering their outputs, losses and input gradients; a follower's executor
//     runs them (Serve). Neighbouring stages see whole microbatches from the leader only.
//   * Gradients: the reduction is an AllReducer made by StageWorkers::make_reducer over the
//     workers' gradient arenas. The cross-rank reducer sums in process, then across ranks, bucket
//     by bucket behind the same Ready/Finish calls, so the backward pass and the update do not
//     change; it runs for W = 1 too.
//   * Replicated state (weights, versions, optimizer state) is the same on every worker of every
//     rank, so the getters read worker 0's: the leader's, which checkpoints save.
//
// Inputs and outputs are whole microbatches in host memory: what crosses a boundary between
// stages; neighbours never see the split. Workers run on a persistent pool of W threads (none
// for W = 1) and the caller blocks until they are done. Not thread-safe: one thread drives a
// StageExecutor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/job_spec.h"
#include "site/backend/backend.h"
#include "site/collective/all_reducer.h"
#include "site/collective/worker_pool.h"
#include "site/nn/optimizer.h"
#include "site/nn/stage.h"
#include "site/pipeline/rank_call.h"
#include "site/pipeline/weight_history.h"

namespace strait::site {

// How a microbatch's rows are divided: into `parts` contiguous parts as equal as they can be (the
// first n % parts one row longer), this process's workers taking parts first_part,
// first_part + 1, ... (see the seam above; one process: parts = W, first_part = 0).
class RowSplit {
 public:
  RowSplit(int parts, int first_part) : parts_(parts), first_part_(first_part) {}
  // Rows [first, first + count) of an n-row microbatch that local worker `worker` takes; count
  // may be 0 when n < parts.
  std::pair<int64_t, int> Rows(int n, int worker) const {
    return PartRows(n, first_part_ + worker, 1);
  }
  // The rows of parts [first_part, first_part + count), which are contiguous.
  std::pair<int64_t, int> PartRows(int n, int first_part, int count) const;
  // The most rows one part holds of a microbatch of `n` rows.
  int MaxRows(int n) const { return (n + parts_ - 1) / parts_; }

 private:
  int parts_;
  int first_part_;
};

// Makes worker w's backend; called on the thread that will drive that worker (a CUDA backend's
// device becomes current there).
using BackendMaker = std::function<absl::StatusOr<std::unique_ptr<Backend>>(int worker)>;

// Makes the reduction that sums the workers' gradient arenas of one step parity in place:
// arenas[w] (param_count floats on backends[w]); buckets are numbered in the order Backward makes
// them ready. May return null when there is nothing to reduce.
using ReducerMaker = std::function<absl::StatusOr<std::unique_ptr<AllReducer>>(
    const std::vector<Backend*>& backends, std::vector<float*> arenas,
    std::vector<Bucket> buckets)>;

// The in-process all-reduce of `device` workers (CPU: shared memory; CUDA: NCCL, worker w on
// device w); null for one worker.
ReducerMaker InProcessReducer(DeviceKind device);

// The workers of a StageExecutor.
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
  // A site of several ranks: this process is rank `rank` of `ranks`, its workers taking parts
  // rank * count .. rank * count + count - 1 of each microbatch's ranks * count parts.
  int rank = 0;
  int ranks = 1;
  // The leader (rank 0 of ranks > 1): the followers, which mirror its calls. Not owned; must
  // outlive the executor.
  RankPeers* peers = nullptr;
  // Tensor parallelism (core/tensor_split.h): rank r is tensor rank r % tensor_parallel of the
  // data-parallel replica r / tensor_parallel; its one worker holds that tensor rank's shards and
  // sums partial results with `tensor_reducer` (its replica's ranks; not owned). The getters and
  // setters of the leader take and give whole parameters, gathering and scattering the shards.
  int tensor_parallel = 1;
  TensorReducer* tensor_reducer = nullptr;
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

class StageExecutor {
 public:
  // Layers `range` of `model` on `workers`, microbatches of at most `max_batch` samples (what
  // Forward takes; each worker's Stage is sized for its share), weights versioned as
  // `versioning` (VersioningOf(training)). Makes the backends (default CUDA: devices 0 .. W-1;
  // an error when there are fewer), the stages, histories and optimizers, and the reduction (one
  // per gradient arena).
  static absl::StatusOr<std::unique_ptr<StageExecutor>> Create(
      const ModelSpec& model, LayerRange range, const OptimizerSpec& optimizer, int max_batch,
      WeightVersioning versioning, const StageWorkers& workers);
  ~StageExecutor();
  StageExecutor(const StageExecutor&) = delete;
  StageExecutor& operator=(const StageExecutor&) = delete;

  LayerRange range() const { return stage(0).range(); }
  bool is_first() const { return stage(0).is_first(); }
  bool is_last() const { return stage(0).is_last(); }
  int64_t input_features() const { return stage(0).input_features(); }    // Floats per sample in.
  int64_t output_features() const { return stage(0).output_features(); }  // Floats per sample out.
  int64_t param_count() const { return stage(0).full_param_count(); }     // Of the whole layers.
  int max_batch() const { return max_batch_; }
  // Bytes one microbatch in flight keeps on all workers together (Stage::bytes_per_microbatch;
  // each worker's stage is sized for its share).
  int64_t bytes_per_microbatch() const { return stage(0).bytes_per_microbatch() * workers(); }
  int workers() const { return static_cast<int>(workers_.size()); }
  int weight_versions() const { return history(0).versions(); }
  float lookahead() const { return history(0).lookahead(); }
  // k of the newest weights L_k: the updates applied (counting those of a restored checkpoint).
  int64_t weights_version() const { return history(0).newest(); }
  // 2bw with update eager and grad_clip (schedule.h LaggedClip): the clipping scale of the newest
  // global norm, which the next update applies. The stage that computes the norm (the first, or
  // `strait train`'s only one) keeps it here so that its checkpoint carries it; 1 before any.
  float lagged_clip_scale() const { return lagged_clip_scale_; }
  void set_lagged_clip_scale(float scale) { lagged_clip_scale_ = scale; }
  // Hash of the family and the layouts of the stage's layers (Stage::Fingerprint): checkpoints of
  // a different model or split do not load.
  uint64_t Fingerprint() const { return stage(0).Fingerprint(); }
  // The workers' backends, e.g. "cpu (1 threads), cpu (1 threads)".
  std::string device_names() const;

  // Runs microbatch `microbatch` of global step `step` (0-based): input [n, input_features()]
  // -> output [n, output_features()] (not copied when null), 1 <= n <= max_batch(). Keeps what
  // Backward needs until Backward or Discard.
  absl::Status Forward(int64_t step, int microbatch, int n, const float* input, float* output,
                       const ForwardOptions& options = {});

  // Last stage only, after Forward(microbatch): softmax cross-entropy of its logits against labels
  // [n] (host), the workers' results summed in worker order; keeps dLoss/dlogits = (softmax -
  // onehot) * grad_scale for Backward (grad_scale = 1 / global batch: the loss is the mean over
  // the global batch).
  absl::StatusOr<LossResult> Loss(int microbatch, const int32_t* labels, float grad_scale);

  // Backpropagates microbatch `microbatch`: grad_output [n, output_features()] (null on the last
  // stage: Loss's gradient) -> grad_input [n, input_features()] (skipped when null). Parameter
  // gradients are added to the arena of the microbatch's step, computed with the weights its
  // Forward used. last_of_step: this is the step's last microbatch, so the gradient reduction of
  // that step runs (overlapped with this backward) and is complete when this returns; every
  // other microbatch of the step must have been backpropagated before. After an error the
  // microbatch stays in flight (Discard drops it).
  absl::Status Backward(int microbatch, const float* grad_output, float* grad_input,
                        bool last_of_step);

  // Drops a microbatch's saved state without a backward pass (after evaluation).
  void Discard(int microbatch);

  // Zeroes the gradient arena that accumulates the gradient of step `step` (with two weight
  // versions, the arena of step - 2, which must have been applied by then).
  void ZeroGrad(int64_t step = 0);
  // `downstream` plus the sums of squares of the (reduced) gradient of step `step`, added layer by
  // layer from the last to the first: chaining stages from the last to the first (each passing its
  // result on as the previous stage's `downstream`) adds in the same order as one stage of all
  // layers, so global-norm clipping across sites gives the same bits as one process.
  absl::StatusOr<double> GradSumSquares(double downstream = 0.0, int64_t step = 0);
  // Tied embeddings (core/tied_embeddings.h), on the reduced gradient of step `step`, before
  // GradSumSquares. TiedGrad: this stage's gradient of the tied matrix (of its first copy; host
  // memory; empty when it holds no copy). AddTiedGrad: adds `other` (the other end's TiedGrad) to
  // every copy on every worker. TieLocalGrads: a stage that holds both copies gives each their
  // sum; a no-op otherwise. Either way each copy ends with g_embed + g_head, the same bits.
  absl::StatusOr<std::vector<float>> TiedGrad(int64_t step) const;
  // Multiplies the (reduced) gradient of step `step` of layers `layers` (model indices inside
  // range()) by `factor` on every worker: a stage that dropped stale gradients makes its gradient
  // the mean over the microbatches it kept (schedule.h KeptGradientScale), before the tied
  // exchange and GradSumSquares. InvalidArgument for layers outside range().
  absl::Status ScaleGrads(int64_t step, LayerRange layers, float factor);
  absl::Status AddTiedGrad(int64_t step, absl::Span<const float> other);
  absl::Status TieLocalGrads(int64_t step);
  // Every worker applies the optimizer to the newest weights with the gradient of step `step` - 1
  // scaled by grad_scale (`step` counts updates from 1): the newest weights become L_step
  // (WeightHistory::Update). With two versions, FailedPrecondition (nothing changed) while a
  // microbatch in flight computes with the version the update drops.
  absl::Status OptimizerStep(int64_t step, float grad_scale);

  // Host copies (worker 0's; every worker holds the same), parameters in layout order (layer by
  // layer, param by param). Params: the newest weights L_k. PreviousParams, LookaheadParams,
  // Grads: WeightHistory's Previous, Lookahead, Grads.
  absl::StatusOr<std::vector<float>> Params() const;
  absl::StatusOr<std::vector<float>> PreviousParams() const;
  absl::StatusOr<std::vector<float>> LookaheadParams() const;
  absl::StatusOr<std::vector<float>> Grads(int64_t step = 0) const;
  absl::StatusOr<std::vector<float>> OptimizerState() const;
  // The setters write every worker. SetParams overwrites the newest weights (the version number
  // stays); RestoreWeights: WeightHistory::Restore.
  absl::Status SetParams(absl::Span<const float> params);
  absl::Status RestoreWeights(int64_t version, absl::Span<const float> newest,
                              absl::Span<const float> previous,
                              absl::Span<const float> lookahead = {});
  absl::Status SetOptimizerState(absl::Span<const float> state);
  // Overwrites the gradient of `step` on every worker (the replicas' mean of it:
  // JobSpec::replicas). FAILED_PRECONDITION on a site of several ranks (replicas take sites of one
  // machine).
  absl::Status SetGrads(int64_t step, absl::Span<const float> grads);

  // A follower rank: runs the call its leader mirrored (see rank_call.h), with this rank's rows of
  // the microbatch; returns this rank's rows of the outputs. InvalidArgument for a call whose
  // sizes do not fit the stage (the leader's link is authenticated, but is checked like any input).
  absl::StatusOr<RankResult> Serve(const RankCall& call);

 private:
  struct Worker {
    std::unique_ptr<Backend> backend;
    // Declared after the backend they allocate from: destroyed first.
    std::unique_ptr<Stage> stage;
    std::unique_ptr<WeightHistory> history;
    std::unique_ptr<Optimizer> optimizer;
    std::vector<const LayerParams*> views;  // The views of the pass in progress (reused).
  };
  // A microbatch between its Forward and its Backward or Discard.
  struct InFlight {
    int rows = 0;
    int64_t step = 0;
    int64_t weights = 0;                 // The version its Forward used (resolved) ...
    std::vector<int64_t> layer_weights;  // ... or one per layer.
  };

  StageExecutor(int max_batch, const StageWorkers& workers);
  absl::Status MakeReducers(const StageWorkers& workers);
  const Stage& stage(int w) const { return *workers_[w].stage; }
  const WeightHistory& history(int w) const { return *workers_[w].history; }
  // fn(w) for every worker, each on its own thread (on the caller's when W = 1).
  absl::Status OnWorkers(const std::function<absl::Status(int worker)>& fn) const;
  // fn on worker 0's thread, returning its result.
  template <class T>
  absl::StatusOr<T> FromWorker0(const std::function<absl::StatusOr<T>(const Worker&)>& fn) const;
  // Points worker w's views at the weights microbatch `mb` computes with.
  absl::Status ComposeViews(Worker& w, const InFlight& mb, const char* what);
  absl::Status BackwardOnWorker(int w, int microbatch, const InFlight& mb, const float* grad_output,
                                float* grad_input, bool last_of_step);
  // The rows [first, first + count) of an n-row microbatch that rank `rank` takes (its replica's).
  std::pair<int64_t, int> RankRows(int n, int rank) const;
  // Whether rank `rank` returns outputs: the first tensor rank of its replica (the others compute
  // the same).
  bool Answers(int rank) const { return rank % tensor_parallel_ == 0; }
  // The leader under tensor parallelism: the state `which` of every tensor rank of its replica,
  // assembled into whole parameters (layout order; arenas side by side for the optimizer state).
  // Elsewhere: this rank's own.
  absl::StatusOr<std::vector<float>> Whole(ShardedState which, int64_t step) const;
  absl::StatusOr<std::vector<float>> Local(ShardedState which, int64_t step) const;
  // Rank `rank`'s shards of whole parameters `whole` (arenas side by side); a copy without tensor
  // parallelism.
  std::vector<float> ShardsFor(absl::Span<const float> whole, int rank) const;
  // This rank's part of `whole`: `whole` itself unless the leader shards it (then kept in
  // `storage`), so that a site of one machine copies nothing.
  absl::Span<const float> OwnShards(absl::Span<const float> whole,
                                    std::vector<float>& storage) const;
  // The tensor reducer's error after a pass, if any.
  absl::Status TensorStatus() const;
  // On the leader of several ranks: sends make(r) to every follower r, runs `local`, then hands
  // each follower's result to take(r, result) (when given), in rank order; the first error wins,
  // and every call sent is awaited. Elsewhere: just `local`.
  absl::Status Mirrored(const std::function<RankCall(int rank)>& make,
                        const std::function<absl::Status()>& local,
                        const std::function<absl::Status(int rank, RankResult&)>& take = nullptr);
  absl::StatusOr<LossResult> LossOnWorker(int w, int microbatch, int n, const int32_t* labels,
                                          float grad_scale);
  absl::Status AddTiedGradLocally(int64_t step, absl::Span<const float> other);
  absl::Status SetOptimizerStateLocally(absl::Span<const float> state);
  // Copies a rank's `rows` (first, count) of `features` floats each from `values` into `whole`
  // (a whole microbatch); Internal when the sizes differ (`what` names the tensor).
  static absl::Status PlaceRows(const std::vector<float>& values, std::pair<int64_t, int> rows,
                                int64_t features, float* whole, const char* what);
  // Serve's Forward and Backward: the call's rows placed in a whole-microbatch buffer.
  absl::StatusOr<RankResult> ServeForward(const RankCall& call);
  absl::StatusOr<RankResult> ServeBackward(const RankCall& call);

  const int max_batch_;
  const DeviceKind device_;
  const RowSplit rows_;
  const int rank_, ranks_;
  RankPeers* const peers_;  // The leader's followers, or null.
  const int tensor_parallel_;
  TensorReducer* const tensor_reducer_;
  std::vector<Worker> workers_;
  std::unique_ptr<WorkerPool> pool_;                   // W > 1 only.
  std::vector<std::unique_ptr<AllReducer>> reducers_;  // Per gradient arena, or none.
  std::vector<int> layer_bucket_;  // Stage layer -> reduction bucket (-1: no parameters).
  int num_buckets_ = 0;
  std::map<int, InFlight> in_flight_;  // By microbatch.
  float lagged_clip_scale_ = 1.0f;
};

}  // namespace strait::site
