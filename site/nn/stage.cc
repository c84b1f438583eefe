#include "site/nn/stage.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/backend/counter_rng.h"
#include "site/nn/model.h"

namespace strait {

struct Stage::Microbatch {
  int index = 0;
  int n = 0;
  int64_t step = 0;
  int64_t first_row = 0;
  int64_t weights = 0;       // k of the weights L_k its Forward used; its Backward uses them too.
  int newer_from_layer = 0;  // Layers from this one on used L_{weights+1} (see Forward).
  bool training = true;
  bool has_loss_grad = false;
  DeviceBuffer activations;  // activation_floats_ floats
  DeviceBuffer saved;        // saved_floats_ floats
  DeviceBuffer loss_grad;    // last stage: dLoss/dlogits [max_batch, classes]
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

absl::StatusOr<DeviceBuffer> Floats(Backend* backend, int64_t n) {
  return DeviceBuffer::Create(backend,
                              sizeof(float) * static_cast<size_t>(std::max<int64_t>(n, 1)));
}

}  // namespace

int WeightVersions(Schedule schedule) { return schedule == Schedule::k2BW ? 2 : 1; }

float Lookahead(const TrainingSpec& training) {
  return training.schedule == Schedule::k2BW ? static_cast<float>(training.lookahead) : 0.0f;
}

absl::StatusOr<std::unique_ptr<Stage>> Stage::Create(const ModelSpec& model, LayerRange range,
                                                     const OptimizerSpec& optimizer, int max_batch,
                                                     Backend* backend, int weight_versions,
                                                     float lookahead) {
  if (max_batch < 1) return absl::InvalidArgumentError("max_batch must be at least 1");
  if (weight_versions != 1 && weight_versions != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("a stage holds 1 or 2 weight versions, not ", weight_versions));
  }
  if (!(lookahead >= 0.0f && lookahead <= 1e6f) || (lookahead > 0.0f && weight_versions != 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("lookahead ", lookahead, " with ", weight_versions,
                     " weight version(s): it must be >= 0, and > 0 only with two versions (2bw)"));
  }
  std::unique_ptr<Stage> s(new Stage());
  s->weight_versions_ = weight_versions;
  s->lookahead_ = lookahead;
  s->backend_ = backend;
  s->range_ = range;
  s->num_model_layers_ = model.NumLayers();
  s->max_batch_ = max_batch;
  s->init_seed_ = model.init_seed;
  STRAIT_ASSIGN_OR_RETURN(s->layers_, BuildLayers(model, range));

  // Parameter arena: layers in order, each layer's params in layout order.
  uint64_t fp = CombineKey(0x5354524149540001ull, static_cast<uint64_t>(model.family));
  for (const auto& layer : s->layers_) {
    const LayerLayout& l = layer->layout();
    fp = HashShape(HashShape(HashString(CombineKey(fp, l.index), l.name), l.in_shape), l.out_shape);
    for (const ParamLayout& p : l.params) {
      fp = HashShape(HashString(fp, p.name), p.shape);
      s->param_count_ += p.numel;
    }
  }
  s->fingerprint_ = fp;
  for (int v = 0; v < weight_versions; ++v) {
    STRAIT_ASSIGN_OR_RETURN(DeviceBuffer grads, Floats(backend, s->param_count_));
    s->grads_.push_back(std::move(grads));
  }
  for (int v = 0; v < weight_versions + (lookahead > 0.0f ? 1 : 0); ++v) {
    STRAIT_ASSIGN_OR_RETURN(DeviceBuffer params, Floats(backend, s->param_count_));
    s->params_.push_back(std::move(params));
  }
  std::vector<float> init(s->param_count_);
  std::vector<std::vector<int64_t>> param_offsets;  // [layer][param]
  int64_t offset = 0;
  for (const auto& layer : s->layers_) {
    s->layer_offsets_.push_back(offset);
    param_offsets.emplace_back();
    for (size_t p = 0; p < layer->layout().params.size(); ++p) {
      InitParameter(model, layer->layout(), static_cast<int>(p), init.data() + offset);
      param_offsets.back().push_back(offset);
      offset += layer->layout().params[p].numel;
    }
  }
  s->layer_offsets_.push_back(offset);
  for (size_t slot = 0; slot < s->params_.size(); ++slot) {
    for (int arena = 0; arena < weight_versions; ++arena) {
      std::vector<LayerParams>& views = s->views_.emplace_back();
      for (const std::vector<int64_t>& layer : param_offsets) {
        LayerParams& view = views.emplace_back();
        for (int64_t at : layer) {
          view.value.push_back(s->params_[slot].f32() + at);
          view.grad.push_back(s->grads_[arena].f32() + at);
        }
      }
    }
  }
  // Every version starts as L_0 (steps 0 and 1 of 2bw both use it; P_0 = L_0).
  for (const DeviceBuffer& params : s->params_) {
    backend->CopyToDevice(params.f32(), init.data(), sizeof(float) * init.size());
  }
  STRAIT_ASSIGN_OR_RETURN(s->optimizer_, Optimizer::Create(optimizer, s->param_count_, backend));

  // Per-microbatch and shared buffers, sized for max_batch.
  int64_t max_features = s->layers_.front()->in_features(), scratch = 0;
  s->activation_offsets_.push_back(0);
  s->activation_floats_ = max_batch * s->layers_.front()->in_features();
  for (const auto& layer : s->layers_) {
    s->activation_offsets_.push_back(s->activation_floats_);
    s->activation_floats_ += max_batch * layer->out_features();
    s->saved_offsets_.push_back(s->saved_floats_);
    s->saved_floats_ += layer->SavedFloats(max_batch);
    max_features = std::max(max_features, layer->out_features());
    scratch = std::max(scratch, layer->ScratchFloats(max_batch));
  }
  STRAIT_ASSIGN_OR_RETURN(s->grad_a_, Floats(backend, max_batch * max_features));
  STRAIT_ASSIGN_OR_RETURN(s->grad_b_, Floats(backend, max_batch * max_features));
  STRAIT_ASSIGN_OR_RETURN(s->scratch_, Floats(backend, scratch));
  if (s->is_last()) {
    STRAIT_ASSIGN_OR_RETURN(s->labels_, DeviceBuffer::Create(backend, sizeof(int32_t) * max_batch));
    STRAIT_ASSIGN_OR_RETURN(s->losses_, Floats(backend, max_batch));
    STRAIT_ASSIGN_OR_RETURN(s->correct_,
                            DeviceBuffer::Create(backend, sizeof(int32_t) * max_batch));
  }
  for (int64_t step = 0; step < weight_versions; ++step) s->ZeroGrad(step);
  STRAIT_RETURN_IF_ERROR(backend->Sync());
  return s;
}

Stage::~Stage() = default;

int64_t Stage::input_features() const { return layers_.front()->in_features(); }
int64_t Stage::output_features() const { return layers_.back()->out_features(); }

absl::StatusOr<std::unique_ptr<Stage::Microbatch>> Stage::TakeMicrobatch() {
  if (!free_.empty()) {
    std::unique_ptr<Microbatch> mb = std::move(free_.back());
    free_.pop_back();
    return mb;
  }
  auto mb = std::make_unique<Microbatch>();
  STRAIT_ASSIGN_OR_RETURN(mb->activations, Floats(backend_, activation_floats_));
  STRAIT_ASSIGN_OR_RETURN(mb->saved, Floats(backend_, saved_floats_));
  if (is_last()) {
    STRAIT_ASSIGN_OR_RETURN(mb->loss_grad, Floats(backend_, max_batch_ * output_features()));
  }
  return mb;
}

absl::StatusOr<Stage::Microbatch*> Stage::Find(int microbatch, const char* what) {
  auto it = in_flight_.find(microbatch);
  if (it == in_flight_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, "(microbatch ", microbatch, ") without a Forward of that microbatch"));
  }
  return it->second.get();
}

absl::StatusOr<int> Stage::WeightsSlot(int64_t version, const char* what) const {
  const bool held =
      version == newest_ || (weight_versions_ == 2 && version == std::max<int64_t>(newest_ - 1, 0));
  if (held && lookahead_ > 0.0f) return LookaheadSlot(version);
  if (version == newest_) return 0;
  if (held) return 1;
  return absl::FailedPreconditionError(absl::StrCat(
      what, " with weights L_", version, ", which this stage does not hold (newest: L_", newest_,
      weight_versions_ == 2 ? absl::StrCat(", previous: L_", std::max<int64_t>(newest_ - 1, 0))
                            : std::string(),
      ")"));
}

absl::StatusOr<Stage::LayerViews> Stage::ViewsOf(int64_t version, int newer_from_layer, int arena,
                                                 const char* what) const {
  STRAIT_ASSIGN_OR_RETURN(const int slot, WeightsSlot(version, what));
  LayerViews views{&Views(slot, arena), &Views(slot, arena), newer_from_layer};
  if (newer_from_layer < static_cast<int>(layers_.size())) {
    STRAIT_ASSIGN_OR_RETURN(const int newer, WeightsSlot(version + 1, what));
    views.newer = &Views(newer, arena);
  }
  return views;
}

PassInfo Stage::Pass(const Microbatch& mb, int layer) const {
  uint64_t key = CombineKey(CombineKey(init_seed_, 0x44524f50 /* "DROP" */), mb.step);
  key = CombineKey(key, static_cast<uint64_t>(mb.index));
  return {mb.training, CombineKey(key, static_cast<uint64_t>(range_.start + layer)), mb.first_row};
}

absl::Status Stage::Forward(int64_t step, int microbatch, int n, const float* input, float* output,
                            bool training, int64_t first_row, int64_t weights,
                            int newer_from_layer) {
  if (n < 1 || n > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatch of ", n, " samples; this stage takes 1 to ", max_batch_));
  }
  if (in_flight_.count(microbatch) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("Forward(microbatch ", microbatch, ") while it is already in flight"));
  }
  if (weights == kNewestWeights) weights = newest_;
  newer_from_layer = std::clamp(newer_from_layer, 0, static_cast<int>(layers_.size()));
  STRAIT_ASSIGN_OR_RETURN(LayerViews views,
                          ViewsOf(weights, newer_from_layer, GradArena(step), "Forward"));
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Microbatch> mb, TakeMicrobatch());
  mb->index = microbatch;
  mb->n = n;
  mb->step = step;
  mb->first_row = first_row;
  mb->weights = weights;
  mb->newer_from_layer = newer_from_layer;
  mb->training = training;
  mb->has_loss_grad = false;
  float* acts = mb->activations.f32();
  backend_->CopyToDevice(acts, input, sizeof(float) * n * input_features());
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->Forward(*backend_, views(i), Pass(*mb, static_cast<int>(i)), n,
                        acts + activation_offsets_[i], acts + activation_offsets_[i + 1],
                        mb->saved.f32() + saved_offsets_[i], scratch_.f32());
  }
  if (output != nullptr) {
    backend_->CopyToHost(output, acts + activation_offsets_.back(),
                         sizeof(float) * n * output_features());
  }
  in_flight_[microbatch] = std::move(mb);
  return backend_->Sync();
}

absl::StatusOr<LossResult> Stage::Loss(int microbatch, const int32_t* labels, float grad_scale) {
  if (!is_last()) return absl::FailedPreconditionError("Loss on a stage that is not the last");
  STRAIT_ASSIGN_OR_RETURN(Microbatch * mb, Find(microbatch, "Loss"));
  const int n = mb->n;
  backend_->CopyToDevice(labels_.i32(), labels, sizeof(int32_t) * n);
  backend_->CrossEntropy(n, static_cast<int>(output_features()),
                         mb->activations.f32() + activation_offsets_.back(), labels_.i32(),
                         grad_scale, losses_.f32(), correct_.i32(), mb->loss_grad.f32());
  std::vector<float> losses(n);
  std::vector<int32_t> correct(n);
  backend_->CopyToHost(losses.data(), losses_.f32(), sizeof(float) * n);
  backend_->CopyToHost(correct.data(), correct_.i32(), sizeof(int32_t) * n);
  STRAIT_RETURN_IF_ERROR(backend_->Sync());
  for (int i = 0; i < n; ++i) {
    if (labels[i] < 0 || labels[i] >= output_features()) {
      return absl::InvalidArgumentError(absl::StrCat("label ", labels[i], " of sample ", i,
                                                     " is not in [0, ", output_features(), ")"));
    }
  }
  LossResult result;
  for (int i = 0; i < n; ++i) {
    result.loss_sum += losses[i];
    result.correct += correct[i];
  }
  mb->has_loss_grad = true;
  return result;
}

absl::Status Stage::Backward(int microbatch, const float* grad_output, float* grad_input,
                             const std::function<void(int layer)>& layer_done) {
  STRAIT_ASSIGN_OR_RETURN(Microbatch * mb, Find(microbatch, "Backward"));
  STRAIT_ASSIGN_OR_RETURN(LayerViews views, ViewsOf(mb->weights, mb->newer_from_layer,
                                                    GradArena(mb->step), "Backward"));
  const int n = mb->n;
  float* dy = grad_a_.f32();
  float* dx = grad_b_.f32();
  if (grad_output != nullptr) {
    backend_->CopyToDevice(dy, grad_output, sizeof(float) * n * output_features());
  } else if (mb->has_loss_grad) {
    dy = mb->loss_grad.f32();  // consumed: the microbatch is freed below
  } else {
    return absl::FailedPreconditionError(absl::StrCat("Backward(microbatch ", microbatch,
                                                      ") without grad_output needs Loss() first"));
  }
  float* acts = mb->activations.f32();
  for (size_t k = layers_.size(); k-- > 0;) {
    float* layer_dx = (k > 0 || grad_input != nullptr) ? dx : nullptr;
    layers_[k]->Backward(*backend_, views(k), Pass(*mb, static_cast<int>(k)), n,
                         acts + activation_offsets_[k], acts + activation_offsets_[k + 1], dy,
                         layer_dx, mb->saved.f32() + saved_offsets_[k], scratch_.f32());
    if (layer_done) layer_done(static_cast<int>(k));
    dy = dx;
    dx = dx == grad_a_.f32() ? grad_b_.f32() : grad_a_.f32();
  }
  if (grad_input != nullptr) {
    backend_->CopyToHost(grad_input, dy, sizeof(float) * n * input_features());
  }
  Discard(microbatch);
  return backend_->Sync();
}

void Stage::Discard(int microbatch) {
  auto it = in_flight_.find(microbatch);
  if (it == in_flight_.end()) return;
  free_.push_back(std::move(it->second));
  in_flight_.erase(it);
}

void Stage::ZeroGrad(int64_t step) { backend_->Fill(grad_arena(step), param_count_, 0.0f); }

absl::StatusOr<double> Stage::GradSumSquares(double downstream, int64_t step) {
  const float* grads = grad_arena(step);
  double sum = downstream;
  for (size_t k = layers_.size(); k-- > 0;) {
    const int64_t numel = layer_offsets_[k + 1] - layer_offsets_[k];
    if (numel > 0) sum += backend_->SumSquares(numel, grads + layer_offsets_[k]);
  }
  STRAIT_RETURN_IF_ERROR(backend_->Sync());
  return sum;
}

absl::Status Stage::OptimizerStep(int64_t step, float grad_scale) {
  if (weight_versions_ == 2) {
    // The previous version is overwritten: no microbatch may still compute with it.
    for (const auto& [index, mb] : in_flight_) {
      if (mb->weights != newest_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "OptimizerStep(", step, ") while microbatch ", index, " of step ", mb->step,
            " still uses weights L_", mb->weights, ", which it would overwrite"));
      }
    }
    // The arena of L_{step-2} (or P_{step-2}) takes L_{step-1}, the weights before this update.
    float* kept = params_[lookahead_ > 0.0f ? LookaheadSlot(step) : 1].f32();
    backend_->CopyOnDevice(kept, params_[0].f32(), sizeof(float) * param_count_);
  }
  optimizer_->Step(step, grad_scale, params_[0].f32(), grad_arena(step - 1));
  if (lookahead_ > 0.0f) {  // P_step = (1 + c) L_step - c L_{step-1}
    backend_->Axpby(param_count_, 1.0f + lookahead_, params_[0].f32(), -lookahead_,
                    params_[LookaheadSlot(step)].f32());
  }
  newest_ = step;
  return backend_->Sync();
}

absl::StatusOr<std::vector<float>> Stage::ToHost(const float* src, int64_t n) const {
  std::vector<float> out(n);
  backend_->CopyToHost(out.data(), src, sizeof(float) * n);
  STRAIT_RETURN_IF_ERROR(backend_->Sync());
  return out;
}

absl::StatusOr<std::vector<float>> Stage::Params() const {
  return ToHost(params_[0].f32(), param_count_);
}
absl::StatusOr<std::vector<float>> Stage::PreviousParams() const {
  if (weight_versions_ != 2) {
    return absl::FailedPreconditionError("PreviousParams of a stage with one weight version");
  }
  STRAIT_ASSIGN_OR_RETURN(const int slot,
                          WeightsSlot(std::max<int64_t>(newest_ - 1, 0), "PreviousParams"));
  return ToHost(params_[slot].f32(), param_count_);
}
absl::StatusOr<std::vector<float>> Stage::LookaheadParams() const {
  if (lookahead_ <= 0.0f) {
    return absl::FailedPreconditionError("LookaheadParams of a stage without lookahead");
  }
  return ToHost(params_[LookaheadSlot(newest_)].f32(), param_count_);
}
absl::StatusOr<std::vector<float>> Stage::Grads(int64_t step) const {
  return ToHost(grad_arena(step), param_count_);
}
absl::StatusOr<std::vector<float>> Stage::OptimizerState() const {
  return ToHost(optimizer_->state(), optimizer_->state_floats());
}

absl::Status Stage::SetParams(absl::Span<const float> params) {
  if (static_cast<int64_t>(params.size()) != param_count_) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetParams: ", params.size(), " floats for a stage of ", param_count_));
  }
  backend_->CopyToDevice(params_[0].f32(), params.data(), sizeof(float) * params.size());
  return backend_->Sync();
}

absl::Status Stage::RestoreWeights(int64_t version, absl::Span<const float> newest,
                                   absl::Span<const float> previous,
                                   absl::Span<const float> lookahead) {
  const size_t want_previous = weight_versions_ == 2 ? static_cast<size_t>(param_count_) : 0;
  const size_t want_lookahead = lookahead_ > 0.0f ? static_cast<size_t>(param_count_) : 0;
  if (version < 0 || previous.size() != want_previous || lookahead.size() != want_lookahead) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RestoreWeights: version ", version, " with ", previous.size(),
        " floats of previous weights and ", lookahead.size(),
        " of lookahead weights for a stage of ", weight_versions_, " weight version(s) of ",
        param_count_, " floats", lookahead_ > 0.0f ? " with lookahead" : ""));
  }
  STRAIT_RETURN_IF_ERROR(SetParams(newest));
  newest_ = version;
  if (weight_versions_ == 2) {
    const int slot = *WeightsSlot(std::max<int64_t>(version - 1, 0), "RestoreWeights");
    backend_->CopyToDevice(params_[slot].f32(), previous.data(), sizeof(float) * previous.size());
  }
  if (lookahead_ > 0.0f) {  // after `previous`: at version 0 both are P_0 = L_0
    backend_->CopyToDevice(params_[LookaheadSlot(version)].f32(), lookahead.data(),
                           sizeof(float) * lookahead.size());
  }
  return backend_->Sync();
}

absl::Status Stage::SetOptimizerState(absl::Span<const float> state) {
  if (static_cast<int64_t>(state.size()) != optimizer_->state_floats()) {
    return absl::InvalidArgumentError(absl::StrCat("SetOptimizerState: ", state.size(),
                                                   " floats for an optimizer state of ",
                                                   optimizer_->state_floats()));
  }
  backend_->CopyToDevice(optimizer_->state(), state.data(), sizeof(float) * state.size());
  return backend_->Sync();
}

}  // namespace strait
