// A pipeline stage: layers [a, b) of a model with their parameters, gradients and optimizer state
// on one backend. The site daemon runs one Stage; `strait train` runs one Stage of all layers.
//
// Training step s with M microbatches (any schedule, 1F1B or GPipe):
//   ZeroGrad();
//   for each microbatch m, in the schedule's order: Forward(s, m, ...);
//     last stage: Loss(m, labels, 1 / global_batch) right after Forward(s, m);
//   Backward(m, ...) for m = 0 .. M-1 in this order (so gradients sum in the same order as one
//     process accumulating them);
//   norm^2 = GradSumSquares() chained from the last stage to the first; scale = clip / max(norm,
//     clip) or 1;
//   OptimizerStep(s + 1, scale).
// Everything random is keyed, not sequential (init: (init_seed, layer, param); dropout:
// (init_seed, step, microbatch, layer)), so any split and any schedule give the same bits.
//
// Inputs and outputs of Forward/Backward are host memory: what crosses a boundary between stages.
// Not thread-safe: one thread drives a Stage. Methods block until their results are on the host.
#pragma once

#include <cstdint>
#include <functional>
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

struct LossResult {
  double loss_sum = 0.0;  // Sum over the microbatch's samples of -log p(label).
  int64_t correct = 0;    // Samples whose arg-max logit is the label.
};

class Stage {
 public:
  // Layers `range` of `model`, microbatches of at most `max_batch` samples, on `backend` (which
  // must outlive the stage). Parameters are initialised (InitParameter) and gradients zeroed.
  static absl::StatusOr<std::unique_ptr<Stage>> Create(const ModelSpec& model, LayerRange range,
                                                       const OptimizerSpec& optimizer,
                                                       int max_batch, Backend* backend);
  ~Stage();

  LayerRange range() const { return range_; }
  bool is_first() const { return range_.start == 0; }
  bool is_last() const { return range_.end == num_model_layers_; }
  int64_t input_features() const;   // Floats per sample that Forward takes.
  int64_t output_features() const;  // Floats per sample that Forward returns.
  int64_t param_count() const { return param_count_; }
  int max_batch() const { return max_batch_; }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  Backend& backend() const { return *backend_; }

  // Runs microbatch `microbatch` of global step `step` (0-based): input [n, input_features()]
  // -> output [n, output_features()] (not copied when output is null). Keeps what Backward needs
  // until Backward or Discard. training = false disables dropout (evaluation). first_row: the
  // index of input's first sample in the whole microbatch when this stage is one of several
  // replicas that each take some of its rows (site/collective); dropout masks are offset by it so
  // that they do not depend on the split. 0 (whole microbatch) everywhere else.
  absl::Status Forward(int64_t step, int microbatch, int n, const float* input, float* output,
                       bool training = true, int64_t first_row = 0);

  // Last stage only, after Forward(microbatch): softmax cross-entropy of its logits against
  // labels [n] (host); keeps dLoss/dlogits = (softmax - onehot) * grad_scale for Backward, where
  // grad_scale = 1 / global batch makes the loss the mean over the global batch.
  absl::StatusOr<LossResult> Loss(int microbatch, const int32_t* labels, float grad_scale);

  // Backpropagates microbatch `microbatch`: grad_output [n, output_features()] (host; null on the
  // last stage to use Loss's gradient) -> grad_input [n, input_features()] (skipped when null).
  // Parameter gradients are added to the gradient arena; the microbatch's state is freed.
  // layer_done (optional) is called on this thread with each layer's index in the stage (last to
  // first) right after that layer's backward is queued on the backend: its parameter gradients
  // are final once the queued work completes, so a local all-reduce can start on them while the
  // earlier layers still compute (site/collective).
  absl::Status Backward(int microbatch, const float* grad_output, float* grad_input,
                        const std::function<void(int layer)>& layer_done = nullptr);

  // Drops a microbatch's saved state without a backward pass (after evaluation).
  void Discard(int microbatch);

  void ZeroGrad();
  // `downstream` plus the sums of squares of this stage's gradients, added layer by layer from the
  // last layer to the first: chaining stages from the last to the first (each passing its result
  // on as the previous stage's `downstream`) adds in the same order as one stage of all layers, so
  // global-norm clipping across sites gives the same bits as one process.
  absl::StatusOr<double> GradSumSquares(double downstream = 0.0);
  // Applies the optimizer with gradients scaled by grad_scale; `step` counts updates from 1.
  absl::Status OptimizerStep(int64_t step, float grad_scale);

  // The gradient arena in device memory (param_count() floats, layout order), which the local
  // all-reduce of replicas (site/collective) sums in place. Owned by the stage.
  float* grad_arena() const { return grads_.f32(); }

  // Host copies of the arenas, parameters in layout order (layer by layer, param by param).
  absl::StatusOr<std::vector<float>> Params() const;
  absl::StatusOr<std::vector<float>> Grads() const;
  absl::StatusOr<std::vector<float>> OptimizerState() const;
  absl::Status SetParams(absl::Span<const float> params);
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
  absl::StatusOr<std::vector<float>> ToHost(const float* src, int64_t n) const;

  Backend* backend_ = nullptr;
  LayerRange range_;
  int num_model_layers_ = 0;
  int max_batch_ = 0;
  uint64_t init_seed_ = 0;
  uint64_t fingerprint_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<LayerParams> views_;
  int64_t param_count_ = 0;
  DeviceBuffer params_, grads_;
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
