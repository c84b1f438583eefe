#include "site/nn/stage.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/tensor_split.h"
#include "core/tied_embeddings.h"
#include "site/backend/counter_rng.h"
#include "site/nn/model.h"
#include "site/nn/model_import.h"

namespace strait::site {

struct Stage::Microbatch {
  int index = 0;
  int n = 0;
  PassOptions pass;
  bool has_loss_grad = false;  // The output activation holds dLoss/dlogits (Loss ran).
  DeviceBuffer activations;    // activation_bytes_
  DeviceBuffer saved;          // saved_bytes_
};

namespace {

uint64_t HashString(uint64_t h, const std::string& s) {
  h = CombineKey(h, s.size());
  for (unsigned char c : s) h = CombineKey(h, c);
  return h;
}

uint64_t HashShape(uint64_t h, const std::vector<int64_t>& shape) {
  h = CombineKey(h, shape.size());
  for (int64_t d : shape) h = CombineKey(h, static_cast<uint64_t>(d));
  return h;
}

absl::StatusOr<DeviceBuffer> Bytes(Backend* backend, int64_t n) {
  return DeviceBuffer::Create(backend, static_cast<size_t>(std::max<int64_t>(n, 1)));
}

absl::StatusOr<DeviceBuffer> Floats(Backend* backend, int64_t n) {
  return Bytes(backend, static_cast<int64_t>(sizeof(float)) * n);
}

int64_t Aligned(int64_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

uint64_t StageFingerprint(const ModelSpec& model, LayerRange range) {
  // The recipe must not change: checkpoints carry it. It hashes the whole layers, so that
  // checkpoints (of whole parameters) do not depend on tensor parallelism.
  if (range.start < 0 || range.end > model.NumLayers() || range.start > range.end) return 0;
  const std::vector<LayerLayout> whole = BuildModelLayout(model);
  uint64_t fp = CombineKey(0x5354524149540001ull, static_cast<uint64_t>(model.family));
  for (int i = range.start; i < range.end; ++i) {
    const LayerLayout& l = whole[i];
    fp = HashShape(HashShape(HashString(CombineKey(fp, l.index), l.name), l.in_shape), l.out_shape);
    for (const ParamLayout& p : l.params) fp = HashShape(HashString(fp, p.name), p.shape);
  }
  // Tied and untied checkpoints hold different models; untied fingerprints stay as they were.
  if (TiedMatrixOf(model)) fp = CombineKey(fp, 0x5449454400000001ull);
  return fp;
}

absl::StatusOr<std::unique_ptr<Stage>> Stage::Create(const ModelSpec& model, LayerRange range,
                                                     int max_batch, Backend* backend,
                                                     TensorShard shard) {
  if (max_batch < 1) return absl::InvalidArgumentError("max_batch must be at least 1");
  std::unique_ptr<Stage> s(new Stage());
  s->backend_ = backend;
  s->model_ = model;
  s->range_ = range;
  s->num_model_layers_ = model.NumLayers();
  s->max_batch_ = max_batch;
  STRAIT_ASSIGN_OR_RETURN(s->layers_, BuildLayers(model, range, shard, backend));
  s->parts_ = shard.parts;
  s->index_ = shard.index;
  s->shards_ = SplitLayers(model, range, shard.parts);
  std::vector<LayerLayout> whole = BuildModelLayout(model);
  s->full_layouts_.assign(whole.begin() + range.start, whole.begin() + range.end);

  // Parameter layout: layers in order, each layer's params in layout order.
  int64_t offset = 0, full_offset = 0;
  for (size_t k = 0; k < s->layers_.size(); ++k) {
    const LayerLayout& l = s->full_layouts_[k];
    s->layer_offsets_.push_back(offset);
    s->param_offsets_.emplace_back();
    s->full_offsets_.emplace_back();
    for (const ParamLayout& p : s->layers_[k]->layout().params) {
      s->param_offsets_.back().push_back(offset);
      offset += p.numel;
    }
    for (const ParamLayout& p : l.params) {
      s->full_offsets_.back().push_back(full_offset);
      full_offset += p.numel;
    }
  }
  s->layer_offsets_.push_back(offset);
  s->full_offsets_.push_back({full_offset});
  if (const std::optional<TiedMatrix> tied = TiedMatrixOf(model)) {
    s->tied_numel_ = tied->numel;
    if (range.start <= tied->embed_layer) {
      s->tied_offsets_.push_back(
          s->param_offsets_[tied->embed_layer - range.start][tied->embed_param]);
    }
    if (range.end > tied->head_layer) {
      s->tied_head_offset_ = s->param_offsets_[tied->head_layer - range.start][tied->head_param];
      s->tied_offsets_.push_back(s->tied_head_offset_);
    }
  }
  s->fingerprint_ = StageFingerprint(model, range);

  // Per-microbatch and shared buffers, sized for max_batch. The model's input is data (f32); every
  // other activation is in the backend's activation type.
  const DType act = backend->activation_dtype();
  int64_t max_features = s->layers_.front()->in_features(), scratch = 0;
  s->activation_dtypes_.push_back(s->is_first() ? DType::kF32 : act);
  s->activation_offsets_.push_back(0);
  s->activation_bytes_ =
      Aligned(max_batch * s->layers_.front()->in_features() * SizeOf(s->activation_dtypes_[0]));
  for (const auto& layer : s->layers_) {
    s->activation_dtypes_.push_back(act);
    s->activation_offsets_.push_back(s->activation_bytes_);
    s->activation_bytes_ += Aligned(max_batch * layer->out_features() * SizeOf(act));
    s->saved_offsets_.push_back(s->saved_bytes_);
    s->saved_bytes_ += Aligned(layer->SavedBytes(max_batch));
    max_features = std::max(max_features, layer->out_features());
    scratch = std::max(scratch, layer->ScratchBytes(max_batch));
  }
  // f32 room in the gradient buffers: the first stage's input gradient is f32.
  STRAIT_ASSIGN_OR_RETURN(s->grad_a_, Floats(backend, max_batch * max_features));
  STRAIT_ASSIGN_OR_RETURN(s->grad_b_, Floats(backend, max_batch * max_features));
  STRAIT_ASSIGN_OR_RETURN(s->scratch_, Bytes(backend, scratch));
  if (act != DType::kF32) {
    STRAIT_ASSIGN_OR_RETURN(s->staging_, Floats(backend, max_batch * max_features));
  }
  if (s->is_last()) {
    const int64_t targets = int64_t{max_batch} * model.TargetsPerSample();
    STRAIT_ASSIGN_OR_RETURN(s->labels_, DeviceBuffer::Create(backend, sizeof(int32_t) * targets));
    STRAIT_ASSIGN_OR_RETURN(s->losses_, Floats(backend, targets));
    STRAIT_ASSIGN_OR_RETURN(s->correct_, DeviceBuffer::Create(backend, sizeof(int32_t) * targets));
  }
  STRAIT_RETURN_IF_ERROR(backend->Sync());
  return s;
}

Stage::~Stage() = default;

int64_t Stage::input_features() const { return layers_.front()->in_features(); }
int64_t Stage::output_features() const { return layers_.back()->out_features(); }

absl::StatusOr<std::vector<float>> Stage::InitialParams() const {
  std::vector<float> whole(full_param_count());
  if (!model_.init_from.empty()) {
    STRAIT_ASSIGN_OR_RETURN(whole, ImportLayers(model_, range_, model_.init_from));
  } else {
    for (size_t k = 0; k < layers_.size(); ++k) {
      for (size_t p = 0; p < full_offsets_[k].size(); ++p) {
        InitParameter(model_, full_layouts_[k], static_cast<int>(p),
                      whole.data() + full_offsets_[k][p]);
      }
    }
  }
  if (parts_ == 1) return whole;
  std::vector<float> init(param_count());
  TakeShards(whole.data(), index_, init.data());
  return init;
}

void Stage::TakeShards(const float* full, int index, float* local) const {
  for (size_t k = 0; k < layers_.size(); ++k) {
    for (size_t p = 0; p < param_offsets_[k].size(); ++p) {
      TakeShard(full + full_offsets_[k][p], full_layouts_[k].params[p].shape, shards_[k].params[p],
                parts_, index, local + param_offsets_[k][p]);
    }
  }
}

void Stage::PutShards(const float* local, int index, float* full) const {
  for (size_t k = 0; k < layers_.size(); ++k) {
    for (size_t p = 0; p < param_offsets_[k].size(); ++p) {
      PutShard(local + param_offsets_[k][p], full_layouts_[k].params[p].shape, shards_[k].params[p],
               parts_, index, full + full_offsets_[k][p]);
    }
  }
}

std::vector<LayerParams> Stage::Views(float* weights, float* grads, TypedPtr operands) const {
  std::vector<LayerParams> views(layers_.size());
  for (size_t k = 0; k < layers_.size(); ++k) {
    for (int64_t at : param_offsets_[k]) {
      views[k].value.push_back(weights + at);
      views[k].grad.push_back(grads + at);
      if (operands) views[k].operand.push_back(operands + at);
    }
  }
  return views;
}

absl::StatusOr<std::unique_ptr<Stage::Microbatch>> Stage::TakeMicrobatch() {
  if (!free_.empty()) {
    std::unique_ptr<Microbatch> mb = std::move(free_.back());
    free_.pop_back();
    return mb;
  }
  auto mb = std::make_unique<Microbatch>();
  STRAIT_ASSIGN_OR_RETURN(mb->activations, Bytes(backend_, activation_bytes_));
  STRAIT_ASSIGN_OR_RETURN(mb->saved, Bytes(backend_, saved_bytes_));
  return mb;
}

TypedPtr Stage::Activation(const Microbatch& mb, size_t k) const {
  return TypedPtr(static_cast<char*>(mb.activations.data()) + activation_offsets_[k],
                  activation_dtypes_[k]);
}

void Stage::FromHost(const float* host, TypedPtr dst, int64_t n) {
  if (dst.is_f32()) {
    backend_->CopyToDevice(dst.data(), host, sizeof(float) * n);
    return;
  }
  backend_->CopyToDevice(staging_.f32(), host, sizeof(float) * n);
  backend_->Convert(n, staging_.f32(), dst);
}

void Stage::ToHost(ConstTypedPtr src, float* host, int64_t n) {
  if (src.is_f32()) {
    backend_->CopyToHost(host, src.data(), sizeof(float) * n);
    return;
  }
  backend_->Convert(n, src, staging_.f32());
  backend_->CopyToHost(host, staging_.f32(), sizeof(float) * n);
}

absl::Status Stage::Import(const BoundaryIn& in, TypedPtr dst, int64_t n) {
  if (in.encoded()) return backend_->DecodeValues(*in.stage, in.payload, n, dst);
  FromHost(in.host, dst, n);
  return absl::OkStatus();
}

absl::Status Stage::Export(ConstTypedPtr src, const BoundaryOut& out, int64_t n) {
  if (out.encoded()) return backend_->EncodeValues(*out.stage, out.seed, src, n, out.payload);
  if (out.host != nullptr) ToHost(src, out.host, n);
  return absl::OkStatus();
}

absl::StatusOr<Stage::Microbatch*> Stage::Find(int microbatch, const char* what) {
  auto it = in_flight_.find(microbatch);
  if (it == in_flight_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, "(microbatch ", microbatch, ") without a Forward of that microbatch"));
  }
  return it->second.get();
}

absl::Status Stage::CheckViews(WeightViews weights, const char* what) const {
  if (weights.size() == layers_.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " with weights for ", weights.size(),
                                                 " layers; the stage has ", layers_.size()));
}

PassInfo Stage::Pass(const Microbatch& mb, int layer) const {
  uint64_t key = CombineKey(CombineKey(model_.init_seed, 0x44524f50 /* "DROP" */), mb.pass.step);
  key = CombineKey(key, static_cast<uint64_t>(mb.index + mb.pass.microbatch_offset));
  return {mb.pass.training, CombineKey(key, static_cast<uint64_t>(range_.start + layer)),
          mb.pass.first_row};
}

absl::Status Stage::Forward(int microbatch, int n, const BoundaryIn& input,
                            const BoundaryOut& output, WeightViews weights,
                            const PassOptions& pass) {
  if (n < 1 || n > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatch of ", n, " samples; this stage takes 1 to ", max_batch_));
  }
  if (in_flight_.count(microbatch) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("Forward(microbatch ", microbatch, ") while it is already in flight"));
  }
  STRAIT_RETURN_IF_ERROR(CheckViews(weights, "Forward"));
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Microbatch> mb, TakeMicrobatch());
  mb->index = microbatch;
  mb->n = n;
  mb->pass = pass;
  mb->has_loss_grad = false;
  if (absl::Status imported = Import(input, Activation(*mb, 0), n * input_features());
      !imported.ok()) {
    free_.push_back(std::move(mb));
    return imported;
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->Forward(*backend_, *weights[i], Pass(*mb, static_cast<int>(i)), n,
                        Activation(*mb, i), Activation(*mb, i + 1),
                        static_cast<char*>(mb->saved.data()) + saved_offsets_[i], scratch_.data());
  }
  const absl::Status exported =
      Export(Activation(*mb, layers_.size()), output, n * output_features());
  in_flight_[microbatch] = std::move(mb);
  STRAIT_RETURN_IF_ERROR(exported);
  return backend_->Sync();
}

absl::StatusOr<Stage::Microbatch*> Stage::FindForLoss(int microbatch, const int32_t* labels) {
  if (!is_last()) return absl::FailedPreconditionError("Loss on a stage that is not the last");
  STRAIT_ASSIGN_OR_RETURN(Microbatch * mb, Find(microbatch, "Loss"));
  const int per_sample = model_.TargetsPerSample();
  const int64_t n = int64_t{mb->n} * per_sample;  // Rows of logits, one per target.
  const int classes = static_cast<int>(output_features() / per_sample);
  for (int64_t i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= classes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label ", labels[i], " of sample ", i / per_sample, " is not in [0, ", classes, ")"));
    }
  }
  if (mb->has_loss_grad) {
    return absl::FailedPreconditionError(
        absl::StrCat("Loss(microbatch ", microbatch, ") twice: its logits are gradients now"));
  }
  return mb;
}

absl::StatusOr<LossResult> Stage::Loss(int microbatch, const int32_t* labels, float grad_scale) {
  STRAIT_ASSIGN_OR_RETURN(Microbatch * mb, FindForLoss(microbatch, labels));
  const int per_sample = model_.TargetsPerSample();
  const int64_t n = int64_t{mb->n} * per_sample;
  const int classes = static_cast<int>(output_features() / per_sample);
  backend_->CopyToDevice(labels_.i32(), labels, sizeof(int32_t) * n);
  backend_->ClassifierLoss(n, classes, Activation(*mb, layers_.size()), labels_.i32(), grad_scale,
                           losses_.f32(), correct_.i32());
  std::vector<float> losses(n);
  std::vector<int32_t> correct(n);
  backend_->CopyToHost(losses.data(), losses_.f32(), sizeof(float) * n);
  backend_->CopyToHost(correct.data(), correct_.i32(), sizeof(int32_t) * n);
  STRAIT_RETURN_IF_ERROR(backend_->Sync());
  LossResult result;
  for (int64_t i = 0; i < n; ++i) {
    result.loss_sum += losses[i];
    result.correct += correct[i];
  }
  mb->has_loss_grad = true;
  return result;
}

absl::StatusOr<LossResult> Stage::DistillLoss(int microbatch, const int32_t* labels,
                                              const TeacherTargets& teacher, int64_t first_row,
                                              const DistillTerms& terms, float grad_scale) {
  STRAIT_ASSIGN_OR_RETURN(Microbatch * mb, FindForLoss(microbatch, labels));
  const int per_sample = model_.TargetsPerSample();
  const int64_t n = int64_t{mb->n} * per_sample;
  const int classes = static_cast<int>(output_features() / per_sample);
  if (first_row < 0 || first_row + n > teacher.rows) {
    return absl::InvalidArgumentError(absl::StrCat("the teacher's targets hold ", teacher.rows,
                                                   " rows; this microbatch needs rows [", first_row,
                                                   ", ", first_row + n, ")"));
  }
  std::vector<float> logits(n * classes), grad(n * classes);
  const TypedPtr device_logits = Activation(*mb, layers_.size());
  ToHost(device_logits, logits.data(), n * classes);
  STRAIT_RETURN_IF_ERROR(backend_->Sync());
  LossResult result;
  for (int64_t r = 0; r < n; ++r) {
    const absl::Span<const float> z = absl::MakeConstSpan(logits).subspan(r * classes, classes);
    const absl::Span<float> g = absl::MakeSpan(grad).subspan(r * classes, classes);
    STRAIT_ASSIGN_OR_RETURN(DistillationResult d,
                            DistillationLoss(z, labels[r], teacher.Row(first_row + r), terms, g));
    result.loss_sum += d.cross_entropy;
    result.correct += std::max_element(z.begin(), z.end()) - z.begin() == labels[r];
    for (float& v : g) v *= grad_scale;
  }
  FromHost(grad.data(), device_logits, n * classes);
  mb->has_loss_grad = true;
  STRAIT_RETURN_IF_ERROR(backend_->Sync());
  return result;
}

absl::Status Stage::Backward(int microbatch, const BoundaryIn& grad_output,
                             const BoundaryOut& grad_input, WeightViews weights,
                             const std::function<void(int layer)>& layer_done) {
  STRAIT_ASSIGN_OR_RETURN(Microbatch * mb, Find(microbatch, "Backward"));
  STRAIT_RETURN_IF_ERROR(CheckViews(weights, "Backward"));
  const int n = mb->n;
  const size_t last = layers_.size();
  TypedPtr dy = grad_a_.typed(activation_dtypes_[last]);
  if (!grad_output.empty()) {
    STRAIT_RETURN_IF_ERROR(Import(grad_output, dy, n * output_features()));
  } else if (mb->has_loss_grad) {
    dy = Activation(*mb, last);  // the logits' gradient; consumed: the microbatch is freed below
  } else {
    return absl::FailedPreconditionError(absl::StrCat("Backward(microbatch ", microbatch,
                                                      ") without grad_output needs Loss() first"));
  }
  void* dx_buffer = grad_b_.data();
  for (size_t k = last; k-- > 0;) {
    const TypedPtr dx(dx_buffer, activation_dtypes_[k]);
    const TypedPtr layer_dx = (k > 0 || !grad_input.empty()) ? dx : TypedPtr();
    layers_[k]->Backward(*backend_, *weights[k], Pass(*mb, static_cast<int>(k)), n,
                         Activation(*mb, k), Activation(*mb, k + 1), dy, layer_dx,
                         static_cast<const char*>(mb->saved.data()) + saved_offsets_[k],
                         scratch_.data());
    if (layer_done) layer_done(static_cast<int>(k));
    dy = dx;
    dx_buffer = dx_buffer == grad_a_.data() ? grad_b_.data() : grad_a_.data();
  }
  const absl::Status exported = Export(dy, grad_input, n * input_features());
  Discard(microbatch);
  STRAIT_RETURN_IF_ERROR(exported);
  return backend_->Sync();
}

void Stage::Discard(int microbatch) {
  auto it = in_flight_.find(microbatch);
  if (it == in_flight_.end()) return;
  free_.push_back(std::move(it->second));
  in_flight_.erase(it);
}

absl::StatusOr<double> Stage::GradSumSquares(const float* grads, double downstream) const {
  double sum = downstream;
  auto add = [&](int64_t begin, int64_t end) {
    if (end > begin) sum += backend_->SumSquares(end - begin, grads + begin);
  };
  for (size_t k = layers_.size(); k-- > 0;) {
    const int64_t begin = layer_offsets_[k], end = layer_offsets_[k + 1];
    if (tied_head_offset_ >= begin && tied_head_offset_ < end) {
      // The head's copy of the tied matrix holds the same sum as the embedding's, which counts.
      add(begin, tied_head_offset_);
      add(tied_head_offset_ + tied_numel_, end);
    } else {
      add(begin, end);
    }
  }
  STRAIT_RETURN_IF_ERROR(backend_->Sync());
  return sum;
}

absl::StatusOr<double> Stage::GradSumSquaresOf(const float* grads, double downstream,
                                               bool split) const {
  double sum = downstream;
  for (size_t k = layers_.size(); k-- > 0;) {
    const std::vector<ParamLayout>& params = layers_[k]->layout().params;
    for (size_t p = params.size(); p-- > 0;) {
      const int64_t at = param_offsets_[k][p];
      if ((shards_[k].params[p].axis >= 0) != split || at == tied_head_offset_) continue;
      sum += backend_->SumSquares(params[p].numel, grads + at);
    }
  }
  STRAIT_RETURN_IF_ERROR(backend_->Sync());
  return sum;
}

}  // namespace strait::site
