#include "site/nn/transformer_block.h"

#include "site/backend/counter_rng.h"
#include "site/nn/linear.h"

namespace strait::site {
namespace {

// Parameter indices in the block's layout (core/model_layout.cc).
enum : int {
  kLn1Gamma,
  kLn1Beta,
  kQkvW,
  kQkvB,
  kProjW,
  kProjB,
  kLn2Gamma,
  kLn2Beta,
  kFc1W,
  kFc1B,
  kFc2W,
  kFc2B
};

// Per-microbatch tensors kept for the backward, R = n * T rows.
struct BlockSaved {
  TypedPtr xn1;  // [R, D] ln1(x)
  float* mean1;  // [R]
  float* rstd1;  // [R]
  TypedPtr qkv;  // [R, 3Dl] this rank's heads' queries, keys and values
  TypedPtr att;  // [R, Dl] attention output (this rank's heads merged), input of attn.proj
  TypedPtr r1;   // [R, D] x + attention branch
  TypedPtr xn2;  // [R, D] ln2(r1)
  float* mean2;  // [R]
  float* rstd2;  // [R]
  TypedPtr h;    // [R, Fl] fc1 pre-activation (this rank's part of the MLP)
  TypedPtr g;    // [R, Fl] gelu(h)
  void* attn;    // AttentionSavedBytes
};

BlockSaved SavedViews(ArenaCarver& c, DType act, int64_t rows, int64_t d, int64_t dl, int64_t f) {
  BlockSaved s;
  s.xn1 = c.Take(rows * d, act);
  s.mean1 = c.F32(rows);
  s.rstd1 = c.F32(rows);
  s.qkv = c.Take(rows * 3 * dl, act);
  s.att = c.Take(rows * dl, act);
  s.r1 = c.Take(rows * d, act);
  s.xn2 = c.Take(rows * d, act);
  s.mean2 = c.F32(rows);
  s.rstd2 = c.F32(rows);
  s.h = c.Take(rows * f, act);
  s.g = c.Take(rows * f, act);
  s.attn = c.Take(0, act).data();  // nullptr while sizing
  return s;
}

// The backward's scratch: dr1, dtmp [R, D], dqkv [R, 3Dl], dh [R, Fl], then the attention's. The
// forward's branch output [R, D] takes dr1's place.
struct BackwardScratch {
  TypedPtr dr1, dtmp, dqkv, dh;
};

BackwardScratch ScratchViews(ArenaCarver& c, DType act, int64_t rows, int64_t d, int64_t dl,
                             int64_t f) {
  BackwardScratch s;
  s.dr1 = c.Take(rows * d, act);
  s.dtmp = c.Take(rows * d, act);
  s.dqkv = c.Take(rows * 3 * dl, act);
  s.dh = c.Take(rows * f, act);
  return s;
}

}  // namespace

TransformerBlock::TransformerBlock(LayerLayout layout, DType act, const TransformerBlockSpec& spec,
                                   TensorShard shard)
    : Layer(std::move(layout), act),
      spec_(spec),
      shard_(shard),
      dl_(spec.dim / shard.parts),
      fl_(spec.mlp_dim / shard.parts) {}

AttentionShape TransformerBlock::Shape(int n) const {
  return {n,
          spec_.tokens,
          spec_.heads / shard_.parts,
          spec_.dim / spec_.heads,
          spec_.causal,
          spec_.fused_attention};
}

int64_t TransformerBlock::SavedBytes(int n) const {
  const int64_t rows = int64_t{n} * spec_.tokens;
  ArenaCarver c;
  SavedViews(c, act_dtype(), rows, spec_.dim, dl_, fl_);
  return c.bytes() + AttentionSavedBytes(Shape(n), act_dtype());
}

// The attention's scratch starts after the backward's own (which is larger than the forward's
// branch output).
int64_t TransformerBlock::ScratchBytesBeforeAttention(int64_t rows) const {
  ArenaCarver c;
  ScratchViews(c, act_dtype(), rows, spec_.dim, dl_, fl_);
  return c.bytes();
}

int64_t TransformerBlock::ScratchBytes(int n) const {
  return ScratchBytesBeforeAttention(int64_t{n} * spec_.tokens) +
         AttentionScratchBytes(Shape(n), act_dtype());
}

void TransformerBlock::SumPartial(Backend& backend, TypedPtr x, int64_t count) const {
  if (shard_.parts > 1) shard_.reducer->AllReduceSum(backend, x, count);
}

void TransformerBlock::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                               int n, ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) {
  const int d = spec_.dim, f = fl_, dl = dl_;
  const int64_t rows = int64_t{n} * spec_.tokens, rd = rows * d;
  const bool drop = pass.training && spec_.dropout > 0.0f;
  const int64_t offset = pass.first_row * spec_.tokens * d;  // of the masks, in [n, T, D] elements
  const auto& w = params.value;
  ArenaCarver saved_carver(saved);
  const BlockSaved s = SavedViews(saved_carver, act_dtype(), rows, d, dl, f);
  ArenaCarver c(scratch);
  const TypedPtr branch = c.Take(rd, act_dtype());  // [R, D]
  void* attn_scratch = static_cast<char*>(scratch) + ScratchBytesBeforeAttention(rows);

  // r1 = x + drop(proj(attention(qkv(ln1(x))))); this rank's heads, their proj summed over ranks;
  // the residual add fused with ln2.
  backend.LayerNormForward(rows, d, x, w[kLn1Gamma], w[kLn1Beta], s.xn1, s.mean1, s.rstd1);
  LinearForward(backend, rows, d, 3 * dl, s.xn1, params.Operand(kQkvW), w[kQkvB],
                ActivationOp::kNone, s.qkv, s.qkv);
  AttentionForward(backend, Shape(n), s.qkv, s.att, s.attn, attn_scratch);
  RowParallelForward(backend, shard_, rows, dl, d, s.att, params.Operand(kProjW), w[kProjB],
                     branch);
  if (drop) {
    backend.Dropout(rd, spec_.dropout, CombineKey(pass.dropout_key, 1), offset, branch, branch);
  }
  backend.ResidualLayerNormForward(rows, d, x, branch, s.r1, w[kLn2Gamma], w[kLn2Beta], s.xn2,
                                   s.mean2, s.rstd2);

  // y = r1 + drop(fc2(gelu(fc1(ln2(r1)))))
  LinearForward(backend, rows, d, f, s.xn2, params.Operand(kFc1W), w[kFc1B], ActivationOp::kGelu,
                s.h, s.g);
  RowParallelForward(backend, shard_, rows, f, d, s.g, params.Operand(kFc2W), w[kFc2B], y);
  if (drop) backend.Dropout(rd, spec_.dropout, CombineKey(pass.dropout_key, 2), offset, y, y);
  backend.Axpy(rd, 1.0f, s.r1, y);
}

void TransformerBlock::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                                int n, ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx,
                                const void* saved, void* scratch) {
  const int d = spec_.dim, f = fl_, dl = dl_;
  const int64_t rows = int64_t{n} * spec_.tokens, rd = rows * d;
  const bool drop = pass.training && spec_.dropout > 0.0f;
  const int64_t offset = pass.first_row * spec_.tokens * d;  // of the masks, in [n, T, D] elements
  const auto& w = params.value;
  const auto& g = params.grad;
  const DType act = act_dtype();
  ArenaCarver saved_carver(saved), scratch_carver(scratch);
  const BlockSaved s = SavedViews(saved_carver, act, rows, d, dl, f);
  const BackwardScratch t = ScratchViews(scratch_carver, act, rows, d, dl, f);
  void* attn_scratch = static_cast<char*>(scratch) + ScratchBytesBeforeAttention(rows);
  const size_t row_bytes = static_cast<size_t>(SizeOf(act)) * rd;

  // MLP branch: dy reaches r1 directly and through fc2 <- gelu <- fc1 <- ln2. The gelu's backward
  // and fc1's bias gradient ride on the product that makes fc2's input gradient.
  backend.CopyOnDevice(t.dr1.data(), dy.data(), row_bytes);
  if (drop) backend.Dropout(rd, spec_.dropout, CombineKey(pass.dropout_key, 2), offset, dy, dy);
  LinearBackward(backend, rows, f, d, s.g, params.Operand(kFc2W), dy, nullptr, g[kFc2W], g[kFc2B]);
  LinearBackwardThroughActivation(backend, rows, f, d, params.Operand(kFc2W), dy,
                                  ActivationOp::kGelu, s.h, t.dh, g[kFc1B]);
  LinearBackward(backend, rows, d, f, s.xn2, params.Operand(kFc1W), t.dh, t.dtmp, g[kFc1W],
                 nullptr);
  SumPartial(backend, t.dtmp, rd);  // This rank's part of the MLP gave part of dln2.
  backend.LayerNormBackward(rows, d, s.r1, w[kLn2Gamma], s.mean2, s.rstd2, t.dtmp, t.dr1,
                            g[kLn2Gamma], g[kLn2Beta]);

  // Attention branch: dr1 reaches x directly and through proj <- attention <- qkv <- ln1.
  const TypedPtr dx_acc = dx ? dx : dy;  // dy is free now
  backend.CopyOnDevice(dx_acc.data(), t.dr1.data(), row_bytes);
  if (drop) {
    backend.Dropout(rd, spec_.dropout, CombineKey(pass.dropout_key, 1), offset, t.dr1, t.dr1);
  }
  LinearBackward(backend, rows, dl, d, s.att, params.Operand(kProjW), t.dr1, t.dtmp, g[kProjW],
                 g[kProjB]);
  AttentionBackward(backend, Shape(n), s.qkv, s.att, s.attn, t.dtmp, t.dqkv, attn_scratch);
  LinearBackward(backend, rows, d, 3 * dl, s.xn1, params.Operand(kQkvW), t.dqkv, t.dtmp, g[kQkvW],
                 g[kQkvB]);
  SumPartial(backend, t.dtmp, rd);  // Likewise this rank's heads for dln1.
  backend.LayerNormBackward(rows, d, x, w[kLn1Gamma], s.mean1, s.rstd1, t.dtmp, dx_acc,
                            g[kLn1Gamma], g[kLn1Beta]);
}

}  // namespace strait::site
