// A pipeline stage: layers [a, b) of a model with their parameters, gradients and optimizer state
// on one backend. The site daemon runs one Stage; `strait train` runs one Stage of all layers.
//
// Training step s with M microbatches under 1f1b or gpipe (one weight version, one gradient arena):
//   ZeroGrad(s);
//   for each microbatch m, in the schedule's order: Forward(s, m, ...);
//     last stage: Loss(m, labels, 1 / global_batch) right after Forward(s, m);
//   Backward(m, ...) for m = 0 .. M-1 in this order (so gradients sum in the same order as one
//     process accumulating them);
//   norm^2 = GradSumSquares(downstream, s) chained from the last stage to the first; scale =
//     clip / max(norm, clip) or 1;
//   OptimizerStep(s + 1, scale).
//
// 2bw (PipeDream-2BW; Create with weight_versions = 2): let L_k be the weights after k updates
// (L_0 the initial ones). Step t computes the gradient g_t of its batch with U_t = L_{max(t-1, 0)}
// (site/pipeline/schedule.h ForwardWeights), and the update of g_t is applied to the newest
// weights: L_{t+1} = Opt(L_t, clip(g_t)), the optimizer's step counter t + 1. So step t+1's
// microbatches can run (with L_t) while g_t's clipping norm travels between the sites, and a stage
// holds two weight versions (the newest L_k and the previous L_{k-1}) and two gradient arenas (the
// gradient of step t in arena t % 2). The same calls as above with the version passed to Forward;
// the update that makes L_{t+1} keeps L_t as the previous version first. Backward uses the version
// its Forward used (recorded per microbatch) and adds into its step's arena.
//
// 2bw with lookahead c > 0 (Create's `lookahead`): microbatches of version k compute with weights
// extrapolated along the last update, P_k = L_k + c (L_k - L_{k-1}) (P_0 = L_0), instead of L_k:
// a one-step-stale gradient taken where the weights are headed is nearer the fresh one than a
// gradient at L_{k-1} (docs/config.md "Schedules" has the measurements). The stage then keeps the
// newest L_k (which updates apply to) and P_k, P_{k-1} for the microbatches in flight: three
// weight arrays. The update that makes L_{k+1} writes P_{k+1} over P_{k-1}.
//
// Everything random is keyed, not sequential (init: (init_seed, layer, param); dropout:
// (init_seed, step, microbatch, layer)), so any split and any schedule give the same bits.
//
// Inputs and outputs of Forward/Backward are host memory: what crosses a boundary between stages.
// Not thread-safe: one thread drives a Stage. Methods block until their results are on the host.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/job_spec.h"
#include "site/backend/backend.h"
#include "site/nn/layer.h"
#include "site/nn/optimizer.h"

namespace strait {

// Weight versions a stage holds under `schedule`: 2 for 2bw, 1 otherwise.
int WeightVersions(Schedule schedule);
// The lookahead a stage of `training` extrapolates its forward weights by (2bw only; 0 otherwise).
float Lookahead(const TrainingSpec& training);

// Forward's default: the newest weights the stage holds.
inline constexpr int64_t kNewestWeights = -1;
inline constexpr int kNoLayer = std::numeric_limits<int>::max();

struct LossResult {
  double loss_sum = 0.0;  // Sum over the microbatch's samples of -log p(label).
  int64_t correct = 0;    // Samples whose arg-max logit is the label.
};

class Stage {
 public:
  // Layers `range` of `model`, microbatches of at most `max_batch` samples, on `backend` (which
  // must outlive the stage). Parameters are initialised (InitParameter) and gradients zeroed.
  // weight_versions (WeightVersions(schedule)): 2 allocates a second parameter arena and a second
  // gradient arena for 2bw; 1 otherwise. lookahead (2bw only, >= 0): see above; > 0 allocates a
  // third parameter arena.
  static absl::StatusOr<std::unique_ptr<Stage>> Create(const ModelSpec& model, LayerRange range,
                                                       const OptimizerSpec& optimizer,
                                                       int max_batch, Backend* backend,
                                                       int weight_versions = 1,
                                                       float lookahead = 0.0f);
  ~Stage();

  LayerRange range() const { return range_; }
  bool is_first() const { return range_.start == 0; }
  bool is_last() const { return range_.end == num_model_layers_; }
  int64_t input_features() const;   // Floats per sample that Forward takes.
  int64_t output_features() const;  // Floats per sample that Forward returns.
  int64_t param_count() const { return param_count_; }
  int max_batch() const { return max_batch_; }
  int weight_versions() const { return weight_versions_; }
  float lookahead() const { return lookahead_; }
  // k of the newest weights L_k: the updates applied (counting those of a restored checkpoint).
  int64_t weights_version() const { return newest_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  Backend& backend() const { return *backend_; }

  // Runs microbatch `microbatch` of global step `step` (0-based): input [n, input_features()]
  // -> output [n, output_features()] (not copied when output is null). Keeps what Backward needs
  // until Backward or Discard. training = false disables dropout (evaluation). first_row: the
  // index of input's first sample in the whole microbatch when this stage is one of several
  // replicas that each take some of its rows (site/collective); dropout masks are offset by it so
  // that they do not depend on the split. 0 (whole microbatch) everywhere else. weights: the
  // version k to compute with (site/pipeline/schedule.h ForwardWeights): L_k, or P_k with
  // lookahead. The stage must hold it: the newest or, with two versions, the previous one
  // (FailedPrecondition otherwise); kNewestWeights: the newest. newer_from_layer: the stage's
  // layers from this index on compute with version weights + 1 instead (which the stage must hold
  // too): one Stage of all layers
  // (`strait train`) reproducing sites whose stages use different versions for one microbatch
  // (2bw with update eager, site/pipeline/schedule.h ForwardWeights).
  absl::Status Forward(int64_t step, int microbatch, int n, const float* input, float* output,
                       bool training = true, int64_t first_row = 0,
                       int64_t weights = kNewestWeights, int newer_from_layer = kNoLayer);

  // Last stage only, after Forward(microbatch): softmax cross-entropy of its logits against
  // labels [n] (host); keeps dLoss/dlogits = (softmax - onehot) * grad_scale for Backward, where
  // grad_scale = 1 / global batch makes the loss the mean over the global batch.
  absl::StatusOr<LossResult> Loss(int microbatch, const int32_t* labels, float grad_scale);

  // Backpropagates microbatch `microbatch`: grad_output [n, output_features()] (host; null on the
  // last stage to use Loss's gradient) -> grad_input [n, input_features()] (skipped when null).
  // Parameter gradients are added to the gradient arena of the microbatch's step, computed with the
  // weights its Forward used (even if an update came in between); the microbatch's state is freed.
  // layer_done (optional) is called on this thread with each layer's index in the stage (last to
  // first) right after that layer's backward is queued on the backend: its parameter gradients
  // are final once the queued work completes, so a local all-reduce can start on them while the
  // earlier layers still compute (site/collective).
  absl::Status Backward(int microbatch, const float* grad_output, float* grad_input,
                        const std::function<void(int layer)>& layer_done = nullptr);

  // Drops a microbatch's saved state without a backward pass (after evaluation).
  void Discard(int microbatch);

  // Zeroes the gradient arena that accumulates the gradient of step `step` (with two arenas, the
  // one of step - 2, which must have been applied by then).
  void ZeroGrad(int64_t step = 0);
  // `downstream` plus the sums of squares of the gradient of step `step`, added layer by layer from
  // the last layer to the first: chaining stages from the last to the first (each passing its
  // result on as the previous stage's `downstream`) adds in the same order as one stage of all
  // layers, so global-norm clipping across sites gives the same bits as one process.
  absl::StatusOr<double> GradSumSquares(double downstream = 0.0, int64_t step = 0);
  // Applies the optimizer to the newest weights with the gradient of step `step` - 1 scaled by
  // grad_scale; `step` counts updates from 1, and the newest weights become L_step. With two
  // versions, the newest weights are first kept as the previous version (copied on the backend),
  // whose microbatches must all be done (FailedPrecondition otherwise: nothing is changed).
  absl::Status OptimizerStep(int64_t step, float grad_scale);

  // The gradient arena of step `step` in device memory (param_count() floats, layout order), which
  // the local all-reduce of replicas (site/collective) sums in place. Owned by the stage.
  float* grad_arena(int64_t step = 0) const { return grads_[GradArena(step)].f32(); }

  // Host copies of the arenas, parameters in layout order (layer by layer, param by param).
  // Params: the newest weights L_k; PreviousParams: with two versions, what microbatches of
  // L_{k-1} compute with (L_{k-1}, or P_{k-1} with lookahead; L_0 while k = 0), FailedPrecondition
  // with one; LookaheadParams: with lookahead, P_k, FailedPrecondition without. Grads: the gradient
  // of step `step`.
  absl::StatusOr<std::vector<float>> Params() const;
  absl::StatusOr<std::vector<float>> PreviousParams() const;
  absl::StatusOr<std::vector<float>> LookaheadParams() const;
  absl::StatusOr<std::vector<float>> Grads(int64_t step = 0) const;
  absl::StatusOr<std::vector<float>> OptimizerState() const;
  // Overwrites the newest weights (the version number stays).
  absl::Status SetParams(absl::Span<const float> params);
  // Restores the weights of a checkpoint taken after `version` updates: the newest L_version and,
  // with two versions, `previous` and `lookahead` as PreviousParams and LookaheadParams returned
  // them (empty where those fail).
  absl::Status RestoreWeights(int64_t version, absl::Span<const float> newest,
                              absl::Span<const float> previous,
                              absl::Span<const float> lookahead = {});
  absl::Status SetOptimizerState(absl::Span<const float> state);

  // Hash of the family and the layouts (names, shapes) of this stage's layers: checkpoints of a
  // different model or split do not load.
  uint64_t Fingerprint() const { return fingerprint_; }

 private:
  struct Microbatch;
  Stage() = default;
  absl::StatusOr<std::unique_ptr<Microbatch>> TakeMicrobatch();
  absl::StatusOr<Microbatch*> Find(int microbatch, const char* what);
  PassInfo Pass(const Microbatch& mb, int layer) const;
  int GradArena(int64_t step) const {
    return static_cast<int>((step % weight_versions_ + weight_versions_) % weight_versions_);
  }
  // The parameter arena that microbatches of L_version compute with (without lookahead 0: the
  // newest, 1: the previous; with it 1 + version % 2), or FailedPrecondition.
  absl::StatusOr<int> WeightsSlot(int64_t version, const char* what) const;
  int LookaheadSlot(int64_t version) const { return 1 + static_cast<int>(version % 2); }
  // Per-layer views of parameter arena `slot` with gradient arena `arena`.
  const std::vector<LayerParams>& Views(int slot, int arena) const {
    return views_[slot * weight_versions_ + arena];
  }
  // The views a microbatch computes with: `older` for layers before newer_from_layer, else `newer`.
  struct LayerViews {
    const std::vector<LayerParams>* older;
    const std::vector<LayerParams>* newer;
    int newer_from_layer;
    const LayerParams& operator()(size_t layer) const {
      return static_cast<int>(layer) < newer_from_layer ? (*older)[layer] : (*newer)[layer];
    }
  };
  absl::StatusOr<LayerViews> ViewsOf(int64_t version, int newer_from_layer, int arena,
                                     const char* what) const;
  absl::StatusOr<std::vector<float>> ToHost(const float* src, int64_t n) const;

  Backend* backend_ = nullptr;
  LayerRange range_;
  int num_model_layers_ = 0;
  int max_batch_ = 0;
  uint64_t init_seed_ = 0;
  uint64_t fingerprint_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;
  int weight_versions_ = 1;
  float lookahead_ = 0.0f;
  int64_t newest_ = 0;                           // k of the newest weights L_k.
  std::vector<std::vector<LayerParams>> views_;  // [slot * weight_versions_ + arena]
  std::vector<int64_t> layer_offsets_;           // Layer k's params start at [k]; [size] = total.
  int64_t param_count_ = 0;
  // [0]: the newest weights; [1] (2bw): the previous version, or with lookahead [1 + k % 2]: P_k.
  // Gradient arenas by step parity.
  std::vector<DeviceBuffer> params_, grads_;
  std::unique_ptr<Optimizer> optimizer_;
  // Per microbatch: activations a_0 (input) .. a_k (output) and each layer's saved floats.
  std::vector<int64_t> activation_offsets_, saved_offsets_;
  int64_t activation_floats_ = 0, saved_floats_ = 0;
  std::map<int, std::unique_ptr<Microbatch>> in_flight_;
  std::vector<std::unique_ptr<Microbatch>> free_;
  // Shared by all microbatches: gradient ping-pong buffers, layer scratch, loss buffers.
  DeviceBuffer grad_a_, grad_b_, scratch_, labels_, losses_, correct_;
};

}  // namespace strait
