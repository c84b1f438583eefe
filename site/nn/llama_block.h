// The LLaMA block (model.family: llama; core/job_spec.h GptSpec): pre-norm with RMSNorm, causal
// grouped-query self-attention with rotary positions, a SwiGLU MLP, no biases.
#pragma once

#include "core/job_spec.h"
#include "site/nn/attention.h"
#include "site/nn/layer.h"

namespace strait::site {

// r = x + drop(o(attention(rope(q, k, v of rmsnorm1(x))))); y = r + drop(down(silu(gate(n)) *
// up(n))), n = rmsnorm2(r). Key/value head g serves query heads [g * G, (g + 1) * G), G = heads /
// kv_heads: its keys and values are repeated for them before the attention ops
// (Backend::RepeatKvHeads) and their gradients summed back (SumKvHeads).
// Params (core/model_layout.cc): attn_norm.gamma, attn.{q,k,v,o}.weight, mlp_norm.gamma,
// mlp.{gate,up,down}.weight. q, k and v follow each other in the parameter arena, as do gate and
// up, so each group is one weight matrix and one product.
// Under tensor parallelism (`shard`) this rank holds heads/parts query heads, kv_heads/parts key
// and value heads and mlp_dim/parts of the MLP; o's and down's outputs are summed across the
// ranks, and the norms' input gradients likewise.
class LlamaBlock final : public Layer {
 public:
  // `layout`: this rank's (ShardLayout).
  LlamaBlock(LayerLayout layout, DType act, const GptSpec& spec, bool fused_attention,
             TensorShard shard = {});
  int64_t SavedBytes(int n) const override;
  int64_t ScratchBytes(int n) const override;
  void Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
               ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) override;
  void Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx, const void* saved,
                void* scratch) override;

 private:
  AttentionShape Shape(int n) const;  // This rank's query heads.
  bool grouped() const { return kv_heads_ != heads_; }
  int64_t ProjectionWidth() const { return int64_t{heads_ + 2 * kv_heads_} * dh_; }
  int64_t ScratchBytesBeforeAttention(int64_t rows) const;
  // Sums a partial gradient over the ranks (nothing for a whole block).
  void SumPartial(Backend& backend, TypedPtr x, int64_t count) const;

  GptSpec spec_;
  bool fused_attention_;
  TensorShard shard_;
  int heads_, kv_heads_, dh_, f_;  // This rank's query and key/value heads, head width, MLP width.
};

}  // namespace strait::site
