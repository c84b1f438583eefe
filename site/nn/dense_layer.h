// The MLP layer fc{i}: Linear, then (hidden layers) an activation and dropout; whole, or this
// rank's part of it under tensor parallelism (core/tensor_split.h: column, row or row-sliced).
#pragma once

#include "core/tensor_split.h"
#include "site/nn/layer.h"

namespace strait::site {

class DenseLayer final : public Layer {
 public:
  // `layout` (this rank's, ShardLayout) has params weight [out, in] and bias [out]. act kNone for
  // the logits layer.
  DenseLayer(LayerLayout layout, DType act_dtype, ActivationOp act, float dropout,
             ShardRole role = ShardRole::kReplicated, TensorShard shard = {});

  int64_t SavedBytes(int n) const override;
  int64_t ScratchBytes(int n) const override;
  void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
               ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) override;
  void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx, const void* saved,
                void* scratch) override;

 private:
  // Dropout of this rank's columns of the whole layer's output (kColumn), row by row.
  void DropColumns(Backend& backend, const PassInfo& pass, int n, TypedPtr y) const;

  ActivationOp act_;
  float dropout_;
  ShardRole role_;
  TensorShard shard_;
};

}  // namespace strait::site
