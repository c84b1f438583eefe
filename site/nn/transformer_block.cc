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
template <typename T>
struct BlockSaved {
  T* xn1;    // [R, D] ln1(x)
  T* mean1;  // [R]
  T* rstd1;  // [R]
  T* att;    // [R, Dl] attention output (this rank's heads merged), input of attn.proj
  T* r1;     // [R, D] x + attention branch
  T* xn2;    // [R, D] ln2(r1)
  T* mean2;  // [R]
  T* rstd2;  // [R]
  T* h;      // [R, Fl] fc1 pre-activation (this rank's part of the MLP)
  T* g;      // [R, Fl] gelu(h)
  T* attn;   // AttentionSavedFloats
};

template <typename T>
BlockSaved<T> SavedViews(T* p, int64_t rows, int64_t d, int64_t dl, int64_t f) {
  BlockSaved<T> s;
  s.xn1 = p, p += rows * d;
  s.mean1 = p, p += rows;
  s.rstd1 = p, p += rows;
  s.att = p, p += rows * dl;
  s.r1 = p, p += rows * d;
  s.xn2 = p, p += rows * d;
  s.mean2 = p, p += rows;
  s.rstd2 = p, p += rows;
  s.h = p, p += rows * f;
  s.g = p, p += rows * f;
  s.attn = p;
  return s;
}

}  // namespace

TransformerBlock::TransformerBlock(LayerLayout layout, const TransformerBlockSpec& spec,
                                   TensorShard shard)
    : Layer(std::move(layout)),
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

int64_t TransformerBlock::SavedFloats(int n) const {
  const int64_t rows = int64_t{n} * spec_.tokens;
  return rows * (3 * spec_.dim + dl_ + 4 + 2 * fl_) + AttentionSavedFloats(Shape(n));
}

// Backward: dr1, dtmp [R, D], dqkv [R, 3Dl], dg [R, Fl], then the attention's scratch; the forward
// needs less (qkv [R, 3Dl] and a branch output [R, D] before the attention scratch).
int64_t TransformerBlock::ScratchFloats(int n) const {
  const int64_t rows = int64_t{n} * spec_.tokens;
  return rows * (2 * spec_.dim + 3 * dl_ + fl_) + AttentionScratchFloats(Shape(n));
}

void TransformerBlock::RowParallel(Backend& backend, int64_t rows, int in, const float* x,
                                   const float* w, const float* b, float* y) const {
  const int d = spec_.dim;
  backend.Gemm(false, true, static_cast<int>(rows), d, in, 1.0f, x, in, w, in, 0.0f, y, d);
  if (shard_.parts > 1) shard_.reducer->AllReduceSum(backend, y, rows * d);
  backend.BiasActivation(rows, d, b, ActivationOp::kNone, y, y);
}

void TransformerBlock::SumPartial(Backend& backend, float* x, int64_t count) const {
  if (shard_.parts > 1) shard_.reducer->AllReduceSum(backend, x, count);
}

void TransformerBlock::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                               int n, const float* x, float* y, float* saved, float* scratch) {
  const int d = spec_.dim, f = fl_, dl = dl_;
  const int64_t rows = int64_t{n} * spec_.tokens, rd = rows * d;
  const bool drop = pass.training && spec_.dropout > 0.0f;
  const int64_t offset = pass.first_row * spec_.tokens * d;  // of the masks, in [n, T, D] elements
  const auto& w = params.value;
  BlockSaved<float> s = SavedViews(saved, rows, d, dl, f);
  float* qkv = scratch;                 // [R, 3Dl]
  float* branch = qkv + 3 * rows * dl;  // [R, D]
  float* attn_scratch = branch + rd;

  // r1 = x + drop(proj(attention(qkv(ln1(x))))); this rank's heads, their proj summed over ranks.
  backend.LayerNormForward(rows, d, x, w[kLn1Gamma], w[kLn1Beta], s.xn1, s.mean1, s.rstd1);
  LinearForward(backend, rows, d, 3 * dl, s.xn1, w[kQkvW], w[kQkvB], ActivationOp::kNone, qkv, qkv);
  AttentionForward(backend, Shape(n), qkv, s.att, s.attn, attn_scratch);
  RowParallel(backend, rows, dl, s.att, w[kProjW], w[kProjB], branch);
  if (drop) {
    backend.Dropout(rd, spec_.dropout, CombineKey(pass.dropout_key, 1), offset, branch, branch);
  }
  backend.CopyOnDevice(s.r1, x, sizeof(float) * rd);
  backend.Axpy(rd, 1.0f, branch, s.r1);

  // y = r1 + drop(fc2(gelu(fc1(ln2(r1)))))
  backend.LayerNormForward(rows, d, s.r1, w[kLn2Gamma], w[kLn2Beta], s.xn2, s.mean2, s.rstd2);
  LinearForward(backend, rows, d, f, s.xn2, w[kFc1W], w[kFc1B], ActivationOp::kGelu, s.h, s.g);
  RowParallel(backend, rows, f, s.g, w[kFc2W], w[kFc2B], y);
  if (drop) backend.Dropout(rd, spec_.dropout, CombineKey(pass.dropout_key, 2), offset, y, y);
  backend.Axpy(rd, 1.0f, s.r1, y);
}

void TransformerBlock::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                                int n, const float* x, const float* y, float* dy, float* dx,
                                const float* saved, float* scratch) {
  const int d = spec_.dim, f = fl_, dl = dl_;
  const int64_t rows = int64_t{n} * spec_.tokens, rd = rows * d;
  const bool drop = pass.training && spec_.dropout > 0.0f;
  const int64_t offset = pass.first_row * spec_.tokens * d;  // of the masks, in [n, T, D] elements
  const auto& w = params.value;
  const auto& g = params.grad;
  BlockSaved<const float> s = SavedViews(saved, rows, d, dl, f);
  float* dr1 = scratch;              // [R, D] dLoss/dr1
  float* dtmp = dr1 + rd;            // [R, D]
  float* dqkv = dtmp + rd;           // [R, 3Dl]
  float* dg = dqkv + 3 * rows * dl;  // [R, Fl]
  float* attn_scratch = dg + rows * f;

  // MLP branch: dy reaches r1 directly and through fc2 <- gelu <- fc1 <- ln2.
  backend.CopyOnDevice(dr1, dy, sizeof(float) * rd);
  if (drop) backend.Dropout(rd, spec_.dropout, CombineKey(pass.dropout_key, 2), offset, dy, dy);
  LinearBackward(backend, rows, f, d, s.g, w[kFc2W], dy, dg, g[kFc2W], g[kFc2B]);
  backend.ActivationBackward(rows * f, ActivationOp::kGelu, s.h, dg, dg);
  LinearBackward(backend, rows, d, f, s.xn2, w[kFc1W], dg, dtmp, g[kFc1W], g[kFc1B]);
  SumPartial(backend, dtmp, rd);  // This rank's part of the MLP gave part of dln2.
  backend.LayerNormBackward(rows, d, s.r1, w[kLn2Gamma], s.mean2, s.rstd2, dtmp, dr1, g[kLn2Gamma],
                            g[kLn2Beta]);

  // Attention branch: dr1 reaches x directly and through proj <- attention <- qkv <- ln1.
  float* dx_acc = dx != nullptr ? dx : dy;  // dy is free now
  backend.CopyOnDevice(dx_acc, dr1, sizeof(float) * rd);
  if (drop) backend.Dropout(rd, spec_.dropout, CombineKey(pass.dropout_key, 1), offset, dr1, dr1);
  LinearBackward(backend, rows, dl, d, s.att, w[kProjW], dr1, dtmp, g[kProjW], g[kProjB]);
  AttentionBackward(backend, Shape(n), s.attn, dtmp, dqkv, attn_scratch);
  LinearBackward(backend, rows, d, 3 * dl, s.xn1, w[kQkvW], dqkv, dtmp, g[kQkvW], g[kQkvB]);
  SumPartial(backend, dtmp, rd);  // Likewise this rank's heads for dln1.
  backend.LayerNormBackward(rows, d, x, w[kLn1Gamma], s.mean1, s.rstd1, dtmp, dx_acc, g[kLn1Gamma],
                            g[kLn1Beta]);
}

}  // namespace strait::site
