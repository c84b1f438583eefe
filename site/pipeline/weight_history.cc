#include "site/pipeline/weight_history.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/schedule.h"
#include "core/status.h"

namespace strait::site {

WeightVersioning VersioningOf(const TrainingSpec& training) {
  if (training.schedule != Schedule::k2BW) return {};
  return {2, static_cast<float>(training.lookahead), DropsStaleGradients(training)};
}

absl::StatusOr<std::unique_ptr<WeightHistory>> WeightHistory::Create(const Stage& stage,
                                                                     WeightVersioning versioning) {
  const int versions = versioning.versions;
  const float lookahead = versioning.lookahead;
  if (versions != 1 && versions != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("a stage holds 1 or 2 weight versions, not ", versions));
  }
  if (!(lookahead >= 0.0f && lookahead <= 1e6f) || (lookahead > 0.0f && versions != 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("lookahead ", lookahead, " with ", versions,
                     " weight version(s): it must be >= 0, and > 0 only with two versions (2bw)"));
  }
  std::unique_ptr<WeightHistory> h(new WeightHistory());
  h->backend_ = &stage.backend();
  h->versioning_ = versioning;
  h->param_count_ = stage.param_count();
  const size_t bytes = sizeof(float) * static_cast<size_t>(std::max<int64_t>(h->param_count_, 1));
  for (int v = 0; v < versions; ++v) {
    STRAIT_ASSIGN_OR_RETURN(DeviceBuffer grads, DeviceBuffer::Create(h->backend_, bytes));
    h->grads_.push_back(std::move(grads));
  }
  for (int v = 0; v < versions + (lookahead > 0.0f ? 1 : 0); ++v) {
    STRAIT_ASSIGN_OR_RETURN(DeviceBuffer weights, DeviceBuffer::Create(h->backend_, bytes));
    h->weights_.push_back(std::move(weights));
  }
  const DType act = h->backend_->activation_dtype();
  if (act != DType::kF32) {
    for (size_t slot = 0; slot < h->weights_.size(); ++slot) {
      STRAIT_ASSIGN_OR_RETURN(
          DeviceBuffer operands,
          DeviceBuffer::Create(h->backend_, SizeOf(act) * std::max<int64_t>(h->param_count_, 1)));
      h->operands_.push_back(std::move(operands));
    }
  }
  for (size_t slot = 0; slot < h->weights_.size(); ++slot) {
    for (const DeviceBuffer& grads : h->grads_) {
      h->views_.push_back(
          stage.Views(h->weights_[slot].f32(), grads.f32(), h->Operands(static_cast<int>(slot))));
    }
  }
  // Every version starts as L_0 (steps 0 and 1 of 2bw both use it; P_0 = L_0).
  STRAIT_ASSIGN_OR_RETURN(const std::vector<float> initial, stage.InitialParams());
  for (size_t slot = 0; slot < h->weights_.size(); ++slot) {
    h->backend_->CopyToDevice(h->weights_[slot].f32(), initial.data(),
                              sizeof(float) * initial.size());
    h->RefreshOperands(static_cast<int>(slot));
  }
  for (int64_t step = 0; step < versions; ++step) h->ZeroGrads(step);
  STRAIT_RETURN_IF_ERROR(h->backend_->Sync());
  return h;
}

WeightHistory::~WeightHistory() = default;

TypedPtr WeightHistory::Operands(int slot) const {
  return operands_.empty() ? TypedPtr() : operands_[slot].typed(backend_->activation_dtype());
}

void WeightHistory::RefreshOperands(int slot) {
  if (!operands_.empty()) backend_->Convert(param_count_, weights_[slot].f32(), Operands(slot));
}

absl::StatusOr<int> WeightHistory::Slot(int64_t version, const char* what) const {
  const bool two = versioning_.versions == 2;
  const bool held = version == newest_ || (two && version == std::max<int64_t>(newest_ - 1, 0));
  if (held && versioning_.lookahead > 0.0f) return LookaheadSlot(version);
  if (version == newest_) return 0;
  if (held) return 1;
  return absl::FailedPreconditionError(absl::StrCat(
      what, " with weights L_", version, ", which this stage does not hold (newest: L_", newest_,
      two ? absl::StrCat(", previous: L_", std::max<int64_t>(newest_ - 1, 0)) : std::string(),
      ")"));
}

absl::StatusOr<const std::vector<LayerParams>*> WeightHistory::Views(int64_t version, int64_t step,
                                                                     const char* what) const {
  if (version == kNewestWeights) version = newest_;
  STRAIT_ASSIGN_OR_RETURN(const int slot, Slot(version, what));
  const int64_t arena_step = versioning_.drop_stale && version < step ? step - 1 : step;
  return &views_[slot * versioning_.versions + GradArena(arena_step)];
}

void WeightHistory::ZeroGrads(int64_t step) { backend_->Fill(grads(step), param_count_, 0.0f); }

absl::Status WeightHistory::Update(int64_t step, Optimizer& optimizer, float grad_scale) {
  float* newest = weights_[0].f32();
  const float c = versioning_.lookahead;
  if (versioning_.versions == 2) {
    // The arena of L_{step-2} (or P_{step-2}) takes L_{step-1}, the weights before this update.
    const int kept = c > 0.0f ? LookaheadSlot(step) : 1;
    backend_->CopyOnDevice(weights_[kept].f32(), newest, sizeof(float) * param_count_);
    RefreshOperands(kept);
  }
  optimizer.Step(step, grad_scale, newest, grads(step - 1), Operands(0));
  if (c > 0.0f) {  // P_step = (1 + c) L_step - c L_{step-1}
    backend_->Axpby(param_count_, 1.0f + c, newest, -c, weights_[LookaheadSlot(step)].f32());
    RefreshOperands(LookaheadSlot(step));
  }
  newest_ = step;
  return backend_->Sync();
}

absl::StatusOr<std::vector<float>> WeightHistory::ToHost(const float* src) const {
  std::vector<float> out(param_count_);
  backend_->CopyToHost(out.data(), src, sizeof(float) * out.size());
  STRAIT_RETURN_IF_ERROR(backend_->Sync());
  return out;
}

absl::StatusOr<std::vector<float>> WeightHistory::Newest() const {
  return ToHost(weights_[0].f32());
}

absl::StatusOr<std::vector<float>> WeightHistory::Previous() const {
  if (versioning_.versions != 2) {
    return absl::FailedPreconditionError("PreviousParams of a stage with one weight version");
  }
  STRAIT_ASSIGN_OR_RETURN(const int slot,
                          Slot(std::max<int64_t>(newest_ - 1, 0), "PreviousParams"));
  return ToHost(weights_[slot].f32());
}

absl::StatusOr<std::vector<float>> WeightHistory::Lookahead() const {
  if (versioning_.lookahead <= 0.0f) {
    return absl::FailedPreconditionError("LookaheadParams of a stage without lookahead");
  }
  return ToHost(weights_[LookaheadSlot(newest_)].f32());
}

absl::StatusOr<std::vector<float>> WeightHistory::Grads(int64_t step) const {
  return ToHost(grads(step));
}

absl::Status WeightHistory::SetNewest(absl::Span<const float> params) {
  if (static_cast<int64_t>(params.size()) != param_count_) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetParams: ", params.size(), " floats for a stage of ", param_count_));
  }
  backend_->CopyToDevice(weights_[0].f32(), params.data(), sizeof(float) * params.size());
  RefreshOperands(0);
  return backend_->Sync();
}

absl::Status WeightHistory::Restore(int64_t version, absl::Span<const float> newest,
                                    absl::Span<const float> previous,
                                    absl::Span<const float> lookahead) {
  const bool two = versioning_.versions == 2, ahead = versioning_.lookahead > 0.0f;
  const size_t want_previous = two ? static_cast<size_t>(param_count_) : 0;
  const size_t want_lookahead = ahead ? static_cast<size_t>(param_count_) : 0;
  if (version < 0 || previous.size() != want_previous || lookahead.size() != want_lookahead) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RestoreWeights: version ", version, " with ", previous.size(),
        " floats of previous weights and ", lookahead.size(),
        " of lookahead weights for a stage of ", versioning_.versions, " weight version(s) of ",
        param_count_, " floats", ahead ? " with lookahead" : ""));
  }
  STRAIT_RETURN_IF_ERROR(SetNewest(newest));
  newest_ = version;
  if (two) {
    const int slot = *Slot(std::max<int64_t>(version - 1, 0), "RestoreWeights");
    backend_->CopyToDevice(weights_[slot].f32(), previous.data(), sizeof(float) * previous.size());
    RefreshOperands(slot);
  }
  if (ahead) {  // after `previous`: at version 0 both are P_0 = L_0
    backend_->CopyToDevice(weights_[LookaheadSlot(version)].f32(), lookahead.data(),
                           sizeof(float) * lookahead.size());
    RefreshOperands(LookaheadSlot(version));
  }
  return backend_->Sync();
}

}  // namespace strait::site
