// The MLP layer fc{i}: Linear, then (hidden layers) an activation and dropout.
#pragma once

#include "site/nn/layer.h"

namespace strait::site {

class DenseLayer final : public Layer {
 public:
  // `layout` has params weight [out, in] and bias [out]. act kNone for the logits layer.
  DenseLayer(LayerLayout layout, ActivationOp act, float dropout);

  int64_t SavedFloats(int n) const override;
  int64_t ScratchFloats(int n) const override { return 0; }
  void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
               const float* x, float* y, float* saved, float* scratch) override;
  void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                const float* x, const float* y, float* dy, float* dx, const float* saved,
                float* scratch) override;

 private:
  ActivationOp act_;
  float dropout_;
};

}  // namespace strait::site
