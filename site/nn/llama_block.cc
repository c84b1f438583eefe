#include "site/nn/llama_block.h"

#include "site/backend/counter_rng.h"
#include "site/nn/linear.h"

namespace strait::site {
namespace {

// Parameter indices in the block's layout (core/model_layout.cc).
enum : int { kAttnNorm, kQ, kK, kV, kO, kMlpNorm, kGate, kUp, kDown };

// Per-microbatch tensors kept for the backward, R = n * T rows; Q = heads * dh (this rank's).
struct BlockSaved {
  TypedPtr xn1;  // [R, D] rmsnorm1(x)
  float* rstd1;  // [R]
  TypedPtr qkv;  // [R, 3Q] rotated queries and keys, values, key/value heads repeated
  TypedPtr att;  // [R, Q] attention output, input of o
  TypedPtr r1;   // [R, D] x + attention branch
  TypedPtr xn2;  // [R, D] rmsnorm2(r1)
  float* rstd2;  // [R]
  TypedPtr gu;   // [R, 2F] gate and up projections
  TypedPtr h;    // [R, F] silu(gate) * up, input of down
};

BlockSaved SavedViews(ArenaCarver& c, DType act, int64_t rows, int64_t d, int64_t q, int64_t f) {
  BlockSaved s;
  s.xn1 = c.Take(rows * d, act);
  s.rstd1 = c.F32(rows);
  s.qkv = c.Take(rows * 3 * q, act);
  s.att = c.Take(rows * q, act);
  s.r1 = c.Take(rows * d, act);
  s.xn2 = c.Take(rows * d, act);
  s.rstd2 = c.F32(rows);
  s.gu = c.Take(rows * 2 * f, act);
  s.h = c.Take(rows * f, act);
  return s;
}

// Scratch: dr1, dtmp [R, D] (the forward's branch output in dr1's place), the projections'
// [R, (heads + 2 kv_heads) dh] (grouped attention only: the forward's unrepeated q, k, v, the
// backward's gradient of them), dqkv [R, 3Q], dh [R, F], dgu [R, 2F]; then the attention's.
struct BlockScratch {
  TypedPtr dr1, dtmp, projections, dqkv, dh, dgu;
};

BlockScratch ScratchViews(ArenaCarver& c, DType act, int64_t rows, int64_t d, int64_t q,
                          int64_t projections, int64_t f) {
  BlockScratch s;
  s.dr1 = c.Take(rows * d, act);
  s.dtmp = c.Take(rows * d, act);
  s.projections = c.Take(rows * projections, act);
  s.dqkv = c.Take(rows * 3 * q, act);
  s.dh = c.Take(rows * f, act);
  s.dgu = c.Take(rows * 2 * f, act);
  return s;
}

}  // namespace

LlamaBlock::LlamaBlock(LayerLayout layout, DType act, const GptSpec& spec, bool fused_attention,
                       TensorShard shard)
    : Layer(std::move(layout), act),
      spec_(spec),
      fused_attention_(fused_attention),
      shard_(shard),
      heads_(spec.heads / shard.parts),
      kv_heads_(spec.KeyValueHeads() / shard.parts),
      dh_(spec.head_dim()),
      f_(spec.mlp_dim / shard.parts) {}

AttentionShape LlamaBlock::Shape(int n) const {
  return {n, spec_.context, heads_, dh_, /*causal=*/true, fused_attention_};
}

int64_t LlamaBlock::SavedBytes(int n) const {
  ArenaCarver c;
  SavedViews(c, act_dtype(), int64_t{n} * spec_.context, spec_.dim, int64_t{heads_} * dh_, f_);
  return c.bytes() + AttentionSavedBytes(Shape(n), act_dtype());
}

int64_t LlamaBlock::ScratchBytesBeforeAttention(int64_t rows) const {
  ArenaCarver c;
  ScratchViews(c, act_dtype(), rows, spec_.dim, int64_t{heads_} * dh_,
               grouped() ? ProjectionWidth() : 0, f_);
  return c.bytes();
}

int64_t LlamaBlock::ScratchBytes(int n) const {
  return ScratchBytesBeforeAttention(int64_t{n} * spec_.context) +
         AttentionScratchBytes(Shape(n), act_dtype());
}

void LlamaBlock::SumPartial(Backend& backend, TypedPtr x, int64_t count) const {
  if (shard_.parts > 1) shard_.reducer->AllReduceSum(backend, x, count);
}

void LlamaBlock::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                         ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) {
  const int d = spec_.dim, q = heads_ * dh_, f = f_;
  const int64_t rows = int64_t{n} * spec_.context, rd = rows * d, width = ProjectionWidth();
  const bool drop = pass.training && spec_.dropout > 0.0f;
  const int64_t offset = pass.first_row * spec_.context * d;  // of the masks, in [n, T, D]
  const auto& w = params.value;
  const DType act = act_dtype();
  ArenaCarver saved_carver(saved), scratch_carver(scratch);
  const BlockSaved s = SavedViews(saved_carver, act, rows, d, q, f);
  const BlockScratch t = ScratchViews(scratch_carver, act, rows, d, q, grouped() ? width : 0, f);
  const TypedPtr branch = t.dr1;
  void* attn_saved = static_cast<char*>(saved) + saved_carver.bytes();
  void* attn_scratch = static_cast<char*>(scratch) + ScratchBytesBeforeAttention(rows);

  // r1 = x + drop(o(attention(rope(qkv(rmsnorm1(x)))))); q, k and v in one product.
  backend.RmsNormForward(rows, d, spec_.norm_eps, x, w[kAttnNorm], s.xn1, s.rstd1);
  const TypedPtr projections = grouped() ? t.projections : s.qkv;
  LinearForward(backend, rows, d, static_cast<int>(width), s.xn1, params.Operand(kQ), nullptr,
                ActivationOp::kNone, projections, projections);
  backend.Rotary(rows, spec_.context, heads_, dh_, spec_.rope_theta, false, projections, width);
  backend.Rotary(rows, spec_.context, kv_heads_, dh_, spec_.rope_theta, false, projections + q,
                 width);
  if (grouped()) backend.RepeatKvHeads(rows, heads_, kv_heads_, dh_, projections, s.qkv);
  AttentionForward(backend, Shape(n), s.qkv, s.att, attn_saved, attn_scratch);
  RowParallelForward(backend, shard_, rows, q, d, s.att, params.Operand(kO), nullptr, branch);
  if (drop) {
    backend.Dropout(rd, spec_.dropout, CombineKey(pass.dropout_key, 1), offset, branch, branch);
  }
  backend.CopyOnDevice(s.r1.data(), x.data(), static_cast<size_t>(SizeOf(act)) * rd);
  backend.Axpy(rd, 1.0f, branch, s.r1);

  // y = r1 + drop(down(silu(gate(n)) * up(n))), n = rmsnorm2(r1); gate and up in one product.
  backend.RmsNormForward(rows, d, spec_.norm_eps, s.r1, w[kMlpNorm], s.xn2, s.rstd2);
  LinearForward(backend, rows, d, 2 * f, s.xn2, params.Operand(kGate), nullptr, ActivationOp::kNone,
                s.gu, s.gu);
  backend.SwiGluForward(rows, f, s.gu, s.h);
  RowParallelForward(backend, shard_, rows, f, d, s.h, params.Operand(kDown), nullptr, y);
  if (drop) backend.Dropout(rd, spec_.dropout, CombineKey(pass.dropout_key, 2), offset, y, y);
  backend.Axpy(rd, 1.0f, s.r1, y);
}

void LlamaBlock::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                          ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx,
                          const void* saved, void* scratch) {
  const int d = spec_.dim, q = heads_ * dh_, f = f_;
  const int64_t rows = int64_t{n} * spec_.context, rd = rows * d, width = ProjectionWidth();
  const bool drop = pass.training && spec_.dropout > 0.0f;
  const int64_t offset = pass.first_row * spec_.context * d;
  const auto& w = params.value;
  const auto& g = params.grad;
  const DType act = act_dtype();
  ArenaCarver saved_carver(saved), scratch_carver(scratch);
  const BlockSaved s = SavedViews(saved_carver, act, rows, d, q, f);
  const BlockScratch t = ScratchViews(scratch_carver, act, rows, d, q, grouped() ? width : 0, f);
  const void* attn_saved = static_cast<const char*>(saved) + saved_carver.bytes();
  void* attn_scratch = static_cast<char*>(scratch) + ScratchBytesBeforeAttention(rows);
  const size_t row_bytes = static_cast<size_t>(SizeOf(act)) * rd;

  // MLP branch: dy reaches r1 directly and through down <- swiglu <- gate, up <- rmsnorm2.
  backend.CopyOnDevice(t.dr1.data(), dy.data(), row_bytes);
  if (drop) backend.Dropout(rd, spec_.dropout, CombineKey(pass.dropout_key, 2), offset, dy, dy);
  LinearBackward(backend, rows, f, d, s.h, params.Operand(kDown), dy, t.dh, g[kDown], nullptr);
  backend.SwiGluBackward(rows, f, s.gu, t.dh, t.dgu);
  LinearBackward(backend, rows, d, 2 * f, s.xn2, params.Operand(kGate), t.dgu, t.dtmp, g[kGate],
                 nullptr);
  SumPartial(backend, t.dtmp, rd);  // This rank's part of the MLP gave part of dn.
  backend.RmsNormBackward(rows, d, s.r1, w[kMlpNorm], s.rstd2, t.dtmp, t.dr1, g[kMlpNorm]);

  // Attention branch: dr1 reaches x directly and through o <- attention <- rope <- qkv <-
  // rmsnorm1.
  const TypedPtr dx_acc = dx ? dx : dy;  // dy is free now
  backend.CopyOnDevice(dx_acc.data(), t.dr1.data(), row_bytes);
  if (drop) {
    backend.Dropout(rd, spec_.dropout, CombineKey(pass.dropout_key, 1), offset, t.dr1, t.dr1);
  }
  LinearBackward(backend, rows, q, d, s.att, params.Operand(kO), t.dr1, t.dtmp, g[kO], nullptr);
  AttentionBackward(backend, Shape(n), s.qkv, s.att, attn_saved, t.dtmp, t.dqkv, attn_scratch);
  const TypedPtr dprojections = grouped() ? t.projections : t.dqkv;
  if (grouped()) backend.SumKvHeads(rows, heads_, kv_heads_, dh_, t.dqkv, dprojections);
  backend.Rotary(rows, spec_.context, heads_, dh_, spec_.rope_theta, true, dprojections, width);
  backend.Rotary(rows, spec_.context, kv_heads_, dh_, spec_.rope_theta, true, dprojections + q,
                 width);
  LinearBackward(backend, rows, d, static_cast<int>(width), s.xn1, params.Operand(kQ), dprojections,
                 t.dtmp, g[kQ], nullptr);
  SumPartial(backend, t.dtmp, rd);  // Likewise this rank's heads for dn1.
  backend.RmsNormBackward(rows, d, x, w[kAttnNorm], s.rstd1, t.dtmp, dx_acc, g[kAttnNorm]);
}

}  // namespace strait::site
