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
  bool fused_attention = false;  // The backend's fused attention ops (AttentionShape::fused).
};

// r = x + drop(attn(ln1(x))); y = r + drop(mlp(ln2(r))), the MLP being fc1 -> GELU -> fc2. The
// residual add that makes r runs fused with ln2 (Backend::ResidualLayerNormForward), fc1's bias
// and GELU in its product's epilogue, and in the backward GELU's derivative and fc1's bias
// gradient in the product that makes fc2's input gradient.
// Params: ln1.{gamma,beta}, attn.qkv.{weight,bias}, attn.proj.{weight,bias}, ln2.{gamma,beta},
// mlp.fc1.{weight,bias}, mlp.fc2.{weight,bias}.
// Under tensor parallelism (`shard`, core/tensor_split.h) this rank holds heads/parts heads and
// mlp_dim/parts of the MLP; the proj and fc2 outputs are summed across the ranks before their
// bias, and the layer norms' input gradients likewise.
class TransformerBlock final : public Layer {
 public:
  // `layout`: this rank's (ShardLayout).
  TransformerBlock(LayerLayout layout, DType act, const TransformerBlockSpec& spec,
                   TensorShard shard = {});
  int64_t SavedBytes(int n) const override;
  int64_t ScratchBytes(int n) const override;
  void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
               ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) override;
  void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx, const void* saved,
                void* scratch) override;

 private:
  AttentionShape Shape(int n) const;  // This rank's heads.
  int64_t ScratchBytesBeforeAttention(int64_t rows) const;
  // Sums a partial gradient over the ranks (nothing for a whole block).
  void SumPartial(Backend& backend, TypedPtr x, int64_t count) const;

  TransformerBlockSpec spec_;
  TensorShard shard_;
  int dl_, fl_;  // This rank's attention width (its heads) and MLP width.
};

}  // namespace strait::site
