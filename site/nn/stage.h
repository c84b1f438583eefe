// A pipeline stage's compute: layers [a, b) of a model on one backend, run with the weights the
// caller hands in (DESIGN.md §3). A Stage holds the layers, the per-microbatch state between a
// Forward and its Backward (activations, what each layer saves), scratch and the loss buffers;
// it holds no parameters. Weight versions (2bw's double buffer, lookahead), gradient arenas and
// the optimizer belong to the schedule's WeightHistory (site/pipeline/weight_history.h), and the
// site's workers, the split of a microbatch across them and the gradient reduction to the
// StageExecutor (site/pipeline/stage_executor.h), which is what the site daemon and `strait
// train` drive.
//
// Everything random is keyed, not sequential (init: (init_seed, layer, param); dropout:
// (init_seed, step, microbatch, layer)), so any split and any schedule give the same bits.
//
// Inputs and outputs of Forward/Backward are host memory in f32: what crosses a boundary between
// stages. On the device activations are stored in the backend's activation type; a bf16 activation
// widens to f32 exactly, so a boundary between sites rounds nothing one process would not.
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
#include "core/tensor_split.h"
#include "site/backend/backend.h"
#include "site/nn/boundary.h"
#include "site/nn/layer.h"
#include "site/nn/teacher_targets.h"

namespace strait::site {

// Over a microbatch's targets: one per sample for a classifier, `context` next tokens per sample
// for a language model (ModelSpec::TargetsPerSample).
struct LossResult {
  double loss_sum = 0.0;  // Sum over the targets of -log p(label).
  int64_t correct = 0;    // Targets whose arg-max logit is the label.
};

// The parameters a pass computes with: one view per layer of the stage (layer i of the stage,
// model layer range().start + i, uses *views[i]), each naming the layer's weights and the
// gradient arena its Backward adds to. The caller composes the list and keeps what it points to
// alive during the call; layers may take their weights from different versions (`strait train`
// imitating sites whose stages use different versions for one microbatch).
using WeightViews = absl::Span<const LayerParams* const>;

// What a forward pass needs besides tensors and weights; Backward reuses its Forward's.
struct PassOptions {
  int64_t step = 0;       // The global step (0-based): keys the dropout masks.
  bool training = true;   // false disables dropout (evaluation).
  int64_t first_row = 0;  // Index of the input's first sample in its whole microbatch, when this
                          // stage computes some of its rows (site/pipeline/stage_executor.h):
                          // dropout masks are offset by it so that they do not depend on the split.
  int microbatch_offset = 0;  // Added to the microbatch's index in the dropout masks' key.
};

// The fingerprint of layers `range` of `model` (Stage::Fingerprint, which checkpoints carry): a
// hash of the whole layers' names and shapes, the same for every tensor-parallel shard.
uint64_t StageFingerprint(const ModelSpec& model, LayerRange range);

class Stage {
 public:
  // Layers `range` of `model`, microbatches of at most `max_batch` samples, on `backend` (which
  // must outlive the stage). With shard.parts > 1: rank shard.index's part of every layer under
  // tensor parallelism (core/tensor_split.h; the reducer must outlive the stage); its arenas hold
  // that rank's shards, in the same order.
  static absl::StatusOr<std::unique_ptr<Stage>> Create(const ModelSpec& model, LayerRange range,
                                                       int max_batch, Backend* backend,
                                                       TensorShard shard = {});
  ~Stage();

  LayerRange range() const { return range_; }
  bool is_first() const { return range_.start == 0; }
  bool is_last() const { return range_.end == num_model_layers_; }
  int64_t input_features() const;   // Floats per sample that Forward takes.
  int64_t output_features() const;  // Floats per sample that Forward returns.
  int64_t param_count() const { return layer_offsets_.back(); }
  int max_batch() const { return max_batch_; }
  // Bytes one microbatch in flight keeps: its activations (input, every layer's output) and what
  // the layers save for the backward pass (the memory a schedule's in-flight microbatches take).
  int64_t bytes_per_microbatch() const { return activation_bytes_ + saved_bytes_; }
  int targets_per_sample() const { return model_.TargetsPerSample(); }  // Labels per sample.
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  // Where layer k's parameters start in a parameter arena (layout order: layer by layer, param by
  // param); [layers().size()] = param_count().
  const std::vector<int64_t>& layer_offsets() const { return layer_offsets_; }
  // The copies of a tied matrix (core/tied_embeddings.h) this stage holds: where each starts in a
  // parameter or gradient arena, the embedding's before the head's; empty without tied embeddings
  // or when the stage holds neither layer. Each copy is tied_numel() floats.
  const std::vector<int64_t>& tied_offsets() const { return tied_offsets_; }
  int64_t tied_numel() const { return tied_numel_; }
  Backend& backend() const { return *backend_; }

  // Tensor parallelism: the whole layers' parameter count, and an arena of the whole layers
  // (layout order, full_param_count() floats) <-> rank `index`'s shards of it (param_count()
  // floats, this stage's order; every rank's stage has the same sizes). Host memory. Without
  // tensor parallelism both are copies.
  int64_t full_param_count() const { return full_offsets_.back().back(); }
  void TakeShards(const float* full, int index, float* local) const;
  void PutShards(const float* local, int index, float* full) const;
  int tensor_parts() const { return parts_; }

  // The initial parameters L_0 in layout order: model.init_from's tensors of this stage's layers
  // (model_import.h), or InitParameter's (a pure function of the seed, the layer and the
  // parameter). Either way every split has the same. Host memory; blocks on file reads.
  absl::StatusOr<std::vector<float>> InitialParams() const;
  // Per-layer views of a parameter arena `weights` and a gradient arena `grads` (device memory of
  // param_count() floats each, layout order; not owned), and of `operands`, the weights' copy in
  // the activation type that products read (param_count() elements; none: products read weights).
  std::vector<LayerParams> Views(float* weights, float* grads,
                                 TypedPtr operands = TypedPtr()) const;

  // Runs microbatch `microbatch`: input [n, input_features()] -> output [n, output_features()]
  // (not copied when output is empty), 1 <= n <= max_batch(), with `weights` (one view per layer).
  // Input and output are host floats or a codec's value payload (boundary.h). Keeps what Backward
  // needs until Backward or Discard.
  absl::Status Forward(int microbatch, int n, const BoundaryIn& input, const BoundaryOut& output,
                       WeightViews weights, const PassOptions& pass = {});

  // Last stage only, after Forward(microbatch): softmax cross-entropy of its logits against
  // labels [n, ModelSpec::TargetsPerSample()] (host); keeps dLoss/dlogits = (softmax - onehot) *
  // grad_scale for Backward (written over the logits: the fused classifier), where grad_scale =
  // 1 / (targets of the global batch) makes the loss the mean over them.
  absl::StatusOr<LossResult> Loss(int microbatch, const int32_t* labels, float grad_scale);

  // Loss with a teacher (knowledge sharing): the same result (the labels' cross-entropy and
  // arg-max hits), but the gradient kept is the distillation loss's (site/nn/distillation_loss.h)
  // times grad_scale, computed on the host in double. The microbatch's targets are rows
  // [first_row, first_row + n * TargetsPerSample()) of `teacher`.
  absl::StatusOr<LossResult> DistillLoss(int microbatch, const int32_t* labels,
                                         const TeacherTargets& teacher, int64_t first_row,
                                         const DistillTerms& terms, float grad_scale);

  // Backpropagates microbatch `microbatch`: grad_output [n, output_features()] (empty on the last
  // stage to use Loss's gradient) -> grad_input [n, input_features()] (skipped when empty), each
  // host floats or a value payload (boundary.h).
  // `weights` must hold the values its Forward computed with; parameter gradients are added to
  // the gradient arenas they name. The microbatch's state is freed. layer_done (optional) is
  // called on this thread with each layer's index in the stage (last to first) right after that
  // layer's backward is queued on the backend: its parameter gradients are final once the queued
  // work completes, so a reduction across workers can start on them while the earlier layers
  // still compute (site/pipeline/stage_executor.h).
  absl::Status Backward(int microbatch, const BoundaryIn& grad_output,
                        const BoundaryOut& grad_input, WeightViews weights,
                        const std::function<void(int layer)>& layer_done = nullptr);

  // Drops a microbatch's saved state without a backward pass (after evaluation).
  void Discard(int microbatch);

  // `downstream` plus the sums of squares of the gradient arena `grads` (param_count() floats,
  // layout order), added layer by layer from the last layer to the first: chaining stages from the
  // last to the first (each passing its result on as the previous stage's `downstream`) adds in
  // the same order as one stage of all layers, so global-norm clipping across sites gives the same
  // bits as one process. The head's copy of a tied matrix is left out (the embedding's counts).
  absl::StatusOr<double> GradSumSquares(const float* grads, double downstream) const;
  // Under tensor parallelism: the same over the split parameters only (`split`: each rank holds
  // its shards, so the ranks' results add up to the whole), or the replicated ones only (the same
  // on every rank), each layer by layer from the last to the first, params in reverse order.
  absl::StatusOr<double> GradSumSquaresOf(const float* grads, double downstream, bool split) const;

  // Hash of the family and the layouts (names, shapes) of this stage's layers: checkpoints of a
  // different model or split do not load. Unchanged across builds for the same layers, so that
  // checkpoints written by earlier builds still load.
  uint64_t Fingerprint() const { return fingerprint_; }

 private:
  struct Microbatch;
  Stage() = default;
  absl::StatusOr<std::unique_ptr<Microbatch>> TakeMicrobatch();
  absl::StatusOr<Microbatch*> Find(int microbatch, const char* what);
  // The last stage's microbatch whose loss is due, its labels checked (Loss, DistillLoss).
  absl::StatusOr<Microbatch*> FindForLoss(int microbatch, const int32_t* labels);
  // Activation a_k of a microbatch (its type: f32 for the first stage's input, else the backend's
  // activation type).
  TypedPtr Activation(const Microbatch& mb, size_t k) const;
  // Host f32 <-> a typed device tensor of n elements (through the f32 staging buffer when the
  // tensor is narrower).
  void FromHost(const float* host, TypedPtr dst, int64_t n);
  void ToHost(ConstTypedPtr src, float* host, int64_t n);
  // The same for a boundary tensor, which may be a value payload (decoded or encoded by the
  // backend where the tensor lives). Export does nothing for an empty `out`.
  absl::Status Import(const BoundaryIn& in, TypedPtr dst, int64_t n);
  absl::Status Export(ConstTypedPtr src, const BoundaryOut& out, int64_t n);
  PassInfo Pass(const Microbatch& mb, int layer) const;
  absl::Status CheckViews(WeightViews weights, const char* what) const;

  Backend* backend_ = nullptr;
  ModelSpec model_;  // For InitialParams.
  LayerRange range_;
  int num_model_layers_ = 0;
  int max_batch_ = 0;
  uint64_t fingerprint_ = 0;
  int parts_ = 1;  // Tensor-parallel ranks; this is rank index_.
  int index_ = 0;
  std::vector<LayerShard> shards_;         // Per layer of the stage.
  std::vector<LayerLayout> full_layouts_;  // The whole layers'.
  std::vector<std::vector<int64_t>>
      full_offsets_;  // [layer][param] in a whole arena; .back().back(): all.
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<int64_t> layer_offsets_;               // Layer k's params start at [k]; [size]: all.
  std::vector<std::vector<int64_t>> param_offsets_;  // [layer][param]: where the param starts.
  std::vector<int64_t> tied_offsets_;
  int64_t tied_numel_ = 0;
  int64_t tied_head_offset_ = -1;  // -1: the stage holds no head copy.
  // Per microbatch: activations a_0 (input) .. a_k (output), their types, and each layer's saved
  // bytes (byte offsets).
  std::vector<int64_t> activation_offsets_, saved_offsets_;
  std::vector<DType> activation_dtypes_;
  int64_t activation_bytes_ = 0, saved_bytes_ = 0;
  std::map<int, std::unique_ptr<Microbatch>> in_flight_;
  std::vector<std::unique_ptr<Microbatch>> free_;
  // Shared by all microbatches: gradient ping-pong buffers, layer scratch, loss buffers, and an f32
  // staging buffer for host copies of narrower tensors.
  DeviceBuffer grad_a_, grad_b_, scratch_, labels_, losses_, correct_, staging_;
};

}  // namespace strait::site
