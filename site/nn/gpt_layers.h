// The language models' own layers: embed (layer 0) and lm_head (the last). gpt's blocks are causal
// TransformerBlocks (site/nn/transformer_block.h), llama's LlamaBlocks (site/nn/llama_block.h).
#pragma once

#include "core/job_spec.h"
#include "site/nn/layer.h"

namespace strait::site {

// Layer 0: y[t] = token_embed[x[t]] (+ pos_embed[t] for gpt), then dropout. x is a window of
// `context` token ids (floats holding whole numbers). Params: token_embed [vocab, D] and, gpt only,
// pos_embed [context, D] (llama's positions are rotary, in its blocks). The input is data, so
// Backward writes zeros to dx when asked for it.
class TokenEmbedLayer final : public Layer {
 public:
  TokenEmbedLayer(LayerLayout layout, DType act, const GptSpec& gpt);
  int64_t SavedBytes(int n) const override { return 0; }
  int64_t ScratchBytes(int n) const override { return 0; }
  void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
               ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) override;
  void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx, const void* saved,
                void* scratch) override;

 private:
  bool positions() const { return layout().params.size() > 1; }  // gpt's pos_embed

  GptSpec gpt_;
};

// The last layer: the final norm, then Linear to the logits over the vocabulary at every position.
// gpt: LayerNorm, params ln.gamma [D], ln.beta [D], fc.weight [vocab, D], fc.bias [vocab]. llama:
// RMSNorm, params norm.gamma [D], fc.weight [vocab, D] (no bias).
class LmHead final : public Layer {
 public:
  LmHead(LayerLayout layout, DType act, const GptSpec& gpt, ModelFamily family);
  int64_t SavedBytes(int n) const override;
  int64_t ScratchBytes(int n) const override;
  void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
               ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) override;
  void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx, const void* saved,
                void* scratch) override;

 private:
  bool rms() const { return family_ == ModelFamily::kLlama; }

  GptSpec gpt_;
  ModelFamily family_;
};

}  // namespace strait::site
