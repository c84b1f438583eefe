// A layer of a model: the unit of splitting between sites (DESIGN.md §3).
//
// Layers are explicit forward/backward pairs on flat device buffers (the llm.c way); they own no
// memory. The stage owns one parameter arena and one gradient arena and hands each layer views
// into them; per microbatch it keeps the layer's input and output and a `saved` buffer of
// SavedBytes(n) bytes that Forward fills and Backward reads. `scratch` (ScratchBytes(n)) is
// shared by all layers and holds nothing between calls. All calls queue work on `backend`.
// Activations, their gradients and what a layer saves of them are stored in the layer's activation
// type (the backend's: site/backend/dtype.h); the model's input (data, token ids) is f32.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/model_layout.h"
#include "site/backend/backend.h"

namespace strait::site {

// Views into the stage's arenas: value[i] and grad[i] hold layout().params[i] (numel floats).
// operand[i], when set, is the same parameter in the activation type (the weights' copy that matrix
// products read, written once per update: site/pipeline/weight_history.h); without it products
// read value[i] (and round it to the product's precision on the way: the same numbers).
struct LayerParams {
  std::vector<float*> value;
  std::vector<float*> grad;
  std::vector<ConstTypedPtr> operand;
  ConstTypedPtr Operand(size_t i) const {
    return operand.empty() ? ConstTypedPtr(value[i]) : operand[i];
  }
};

// What a forward pass needs besides tensors.
struct PassInfo {
  bool training = true;      // false: dropout is the identity (evaluation)
  uint64_t dropout_key = 0;  // Keyed by (seed, step, microbatch, layer): see Stage.
  // Index of the first of the pass's n samples in its microbatch: a worker that holds rows
  // [first_row, first_row + n) of a microbatch (site/collective) offsets its dropout masks by
  // that many rows, so masks do not depend on how a microbatch is split.
  int64_t first_row = 0;
};

// Sums a tensor across the ranks of a tensor-parallel site, in place (site/collective). A failure
// is kept by the implementation and reported after the pass, so that layers stay void.
class TensorReducer {
 public:
  virtual ~TensorReducer() = default;
  // data[0, count) (on `backend`, after the work queued so far) becomes the sum over the ranks.
  virtual void AllReduceSum(Backend& backend, TypedPtr data, int64_t count) = 0;
  // The first failure since the reducer was made (a sum after one is skipped).
  virtual absl::Status status() const = 0;
};

// This rank's part of a layer split `parts` ways (core/tensor_split.h); parts 1: the whole layer.
struct TensorShard {
  int parts = 1;
  int index = 0;
  TensorReducer* reducer = nullptr;  // Set when parts > 1.
};

// Lays tensors out one after another in a byte arena, each aligned to 64 bytes: the same sequence
// of Take calls sizes an arena (base nullptr: only bytes() counts) and then carves it.
class ArenaCarver {
 public:
  explicit ArenaCarver(const void* base = nullptr)
      : base_(static_cast<char*>(const_cast<void*>(base))) {}
  TypedPtr Take(int64_t elements, DType dtype) {
    const int64_t at = used_;
    used_ += (elements * SizeOf(dtype) + 63) / 64 * 64;
    return {base_ != nullptr ? base_ + at : nullptr, dtype};
  }
  float* F32(int64_t elements) { return Take(elements, DType::kF32).f32(); }
  int64_t bytes() const { return used_; }

 private:
  char* base_;
  int64_t used_ = 0;
};

class Layer {
 public:
  // `act`: the type of this layer's activations and of what it saves of them.
  Layer(LayerLayout layout, DType act) : layout_(std::move(layout)), act_(act) {}
  virtual ~Layer() = default;

  const LayerLayout& layout() const { return layout_; }
  int64_t in_features() const { return NumElements(layout_.in_shape); }
  int64_t out_features() const { return NumElements(layout_.out_shape); }
  DType act_dtype() const { return act_; }

  virtual int64_t SavedBytes(int n) const = 0;
  virtual int64_t ScratchBytes(int n) const = 0;

  // y = layer(x) for n samples. x: [n, in_features] (f32 for the model's first layer, which
  // reads data; the activation type otherwise); y: [n, out_features] in the activation type.
  virtual void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                       ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) = 0;

  // Given dy = dLoss/dy ([n, out_features], overwritten: the layer may work in it), adds the
  // parameter gradients to params.grad and writes dx = dLoss/dx ([n, in_features], x's type)
  // unless dx is null. x, y and saved are what Forward saw and left for this microbatch; `pass` is
  // Forward's. On the model's last layer dy may be y itself (the loss's gradient written over the
  // logits), so a last layer must not read y.
  virtual void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                        ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx,
                        const void* saved, void* scratch) = 0;

 private:
  LayerLayout layout_;
  DType act_;
};

}  // namespace strait::site
