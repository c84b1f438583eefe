// The vision transformer's own layers: patch_embed and head (its blocks are TransformerBlocks,
// site/nn/transformer_block.h).
#pragma once

#include "core/job_spec.h"
#include "site/nn/layer.h"

namespace strait::site {

// Layer 0: patches -> Linear (proj) -> [class token; patch tokens] + position embedding -> dropout.
// Params: proj.weight [D, C*p*p], proj.bias [D], cls_token [D], pos_embed [T, D]. The input is
// data, so Backward writes zeros to dx when asked for it.
class PatchEmbedLayer final : public Layer {
 public:
  PatchEmbedLayer(LayerLayout layout, DType act, const VitSpec& vit);
  int64_t SavedBytes(int n) const override;
  int64_t ScratchBytes(int n) const override;
  void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
               ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) override;
  void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx, const void* saved,
                void* scratch) override;

 private:
  VitSpec vit_;
  int patches_, patch_size_, tokens_;
};

// The head: LayerNorm of the class token, then Linear to the logits.
// Params: ln.gamma [D], ln.beta [D], fc.weight [classes, D], fc.bias [classes].
class ClassifierHead final : public Layer {
 public:
  ClassifierHead(LayerLayout layout, DType act, const VitSpec& vit);
  int64_t SavedBytes(int n) const override;
  int64_t ScratchBytes(int n) const override;
  void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
               ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) override;
  void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx, const void* saved,
                void* scratch) override;

 private:
  VitSpec vit_;
  int tokens_;
};

}  // namespace strait::site
