// The pre-LN transformer block of the vision transformer and the GPT language model.
#pragma once

#include "site/nn/attention.h"
#include "site/nn/layer.h"

namespace strait::site {

struct TransformerBlockSpec {
  int tokens = 0;  // Per sample.
  int dim = 0;     // Divisible by heads.
  int heads = 0;
  int mlp_dim = 0;
  float dropout = 0.0f;
  bool causal = false;  // Token t attends to tokens 0..t only (GPT); all tokens otherwise (ViT).
};

// r = x + drop(attn(ln1(x))); y = r + drop(mlp(ln2(r))), the MLP being fc1 -> GELU -> fc2.
// Params: ln1.{gamma,beta}, attn.qkv.{weight,bias}, attn.proj.{weight,bias}, ln2.{gamma,beta},
// mlp.fc1.{weight,bias}, mlp.fc2.{weight,bias}.
class TransformerBlock final : public Layer {
 public:
  TransformerBlock(LayerLayout layout, const TransformerBlockSpec& spec);
  int64_t SavedFloats(int n) const override;
  int64_t ScratchFloats(int n) const override;
  void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
               const float* x, float* y, float* saved, float* scratch) override;
  void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                const float* x, const float* y, float* dy, float* dx, const float* saved,
                float* scratch) override;

 private:
  AttentionShape Shape(int n) const;
  TransformerBlockSpec spec_;
};

}  // namespace strait::site
