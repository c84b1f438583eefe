// A layer of a model: the unit of splitting between sites (DESIGN.md §3).
//
// Layers are explicit forward/backward pairs on flat device buffers (the llm.c way); they own no
// memory. The stage owns one parameter arena and one gradient arena and hands each layer views
// into them; per microbatch it keeps the layer's input and output and a `saved` buffer of
// SavedFloats(n) floats that Forward fills and Backward reads. `scratch` (ScratchFloats(n)) is
// shared by all layers and holds nothing between calls. All calls queue work on `backend`.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/model_layout.h"
#include "site/backend/backend.h"

namespace strait::site {

// Views into the stage's arenas: value[i] and grad[i] hold layout().params[i] (numel floats).
struct LayerParams {
  std::vector<float*> value;
  std::vector<float*> grad;
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
  virtual void AllReduceSum(Backend& backend, float* data, int64_t count) = 0;
  // The first failure since the reducer was made (a sum after one is skipped).
  virtual absl::Status status() const = 0;
};

// This rank's part of a layer split `parts` ways (core/tensor_split.h); parts 1: the whole layer.
struct TensorShard {
  int parts = 1;
  int index = 0;
  TensorReducer* reducer = nullptr;  // Set when parts > 1.
};

class Layer {
 public:
  explicit Layer(LayerLayout layout) : layout_(std::move(layout)) {}
  virtual ~Layer() = default;

  const LayerLayout& layout() const { return layout_; }
  int64_t in_features() const { return NumElements(layout_.in_shape); }
  int64_t out_features() const { return NumElements(layout_.out_shape); }

  virtual int64_t SavedFloats(int n) const = 0;
  virtual int64_t ScratchFloats(int n) const = 0;

  // y = layer(x) for n samples. x: [n, in_features]; y: [n, out_features].
  virtual void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                       const float* x, float* y, float* saved, float* scratch) = 0;

  // Given dy = dLoss/dy ([n, out_features], overwritten: the layer may work in it), adds the
  // parameter gradients to params.grad and writes dx = dLoss/dx ([n, in_features]) unless dx is
  // null. x, y and saved are what Forward saw and left for this microbatch; `pass` is Forward's.
  virtual void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                        const float* x, const float* y, float* dy, float* dx, const float* saved,
                        float* scratch) = 0;

 private:
  LayerLayout layout_;
};

}  // namespace strait::site
