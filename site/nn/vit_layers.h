// The vision transformer's layers: patch_embed, block{i} (pre-LN) and head.
#pragma once

#include "core/job_spec.h"
#include "site/nn/attention.h"
#include "site/nn/layer.h"

namespace strait::site {

// Layer 0: patches -> Linear (proj) -> [class token; patch tokens] + position embedding -> dropout.
// Params: proj.weight [D, C*p*p], proj.bias [D], cls_token [D], pos_embed [T, D]. The input is
// data, so Backward writes zeros to dx when asked for it.
class PatchEmbedLayer final : public Layer {
 public:
  PatchEmbedLayer(LayerLayout layout, const VitSpec& vit);
  int64_t SavedFloats(int n) const override;
  int64_t ScratchFloats(int n) const override;
  void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
               const float* x, float* y, float* saved, float* scratch) override;
  void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                const float* x, const float* y, float* dy, float* dx, const float* saved,
                float* scratch) override;

 private:
  VitSpec vit_;
  int patches_, patch_size_, tokens_;
};

// A pre-LN transformer block: r = x + drop(attn(ln1(x))); y = r + drop(mlp(ln2(r))), the MLP being
// fc1 -> GELU -> fc2. Params: ln1.{gamma,beta}, attn.qkv.{weight,bias}, attn.proj.{weight,bias},
// ln2.{gamma,beta}, mlp.fc1.{weight,bias}, mlp.fc2.{weight,bias}.
class TransformerBlock final : public Layer {
 public:
  TransformerBlock(LayerLayout layout, const VitSpec& vit);
  int64_t SavedFloats(int n) const override;
  int64_t ScratchFloats(int n) const override;
  void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
               const float* x, float* y, float* saved, float* scratch) override;
  void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                const float* x, const float* y, float* dy, float* dx, const float* saved,
                float* scratch) override;

 private:
  AttentionShape Shape(int n) const;
  VitSpec vit_;
  int tokens_;
};

// The head: LayerNorm of the class token, then Linear to the logits.
// Params: ln.gamma [D], ln.beta [D], fc.weight [classes, D], fc.bias [classes].
class ClassifierHead final : public Layer {
 public:
  ClassifierHead(LayerLayout layout, const VitSpec& vit);
  int64_t SavedFloats(int n) const override;
  int64_t ScratchFloats(int n) const override;
  void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
               const float* x, float* y, float* saved, float* scratch) override;
  void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                const float* x, const float* y, float* dy, float* dx, const float* saved,
                float* scratch) override;

 private:
  VitSpec vit_;
  int tokens_;
};

}  // namespace strait::site
