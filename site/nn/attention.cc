#include "site/nn/attention.h"

#include <cmath>

#include "site/nn/layer.h"

namespace strait::site {
namespace {

float Scale(const AttentionShape& s) { return 1.0f / std::sqrt(static_cast<float>(s.dh)); }

int64_t Scores(const AttentionShape& s) { return int64_t{s.n} * s.heads * s.tokens * s.tokens; }

// Batched scratch: Q, K, V, dO, dQ, dK, dV [n, H, T, dh] and dP [n, H, T, T] (the forward uses Q,
// K, V and O in the first four).
struct BatchedScratch {
  TypedPtr q, k, v, o, dq, dk, dv, dp;
};
BatchedScratch Carve(const AttentionShape& s, DType act, void* base) {
  ArenaCarver c(base);
  const int64_t qkv = s.rows() * s.dim();
  BatchedScratch b;
  b.q = c.Take(qkv, act), b.k = c.Take(qkv, act), b.v = c.Take(qkv, act), b.o = c.Take(qkv, act);
  b.dq = c.Take(qkv, act), b.dk = c.Take(qkv, act), b.dv = c.Take(qkv, act);
  b.dp = c.Take(Scores(s), act);
  return b;
}

void GatherHeads(Backend& backend, const AttentionShape& s, ConstTypedPtr qkv,
                 const BatchedScratch& b) {
  const int64_t d = s.dim();
  backend.HeadsToBatch(s.n, s.tokens, s.heads, s.dh, qkv, 3 * d, b.q);
  backend.HeadsToBatch(s.n, s.tokens, s.heads, s.dh, qkv + d, 3 * d, b.k);
  backend.HeadsToBatch(s.n, s.tokens, s.heads, s.dh, qkv + 2 * d, 3 * d, b.v);
}

}  // namespace

AttentionDims AttentionShape::Dims() const {
  AttentionDims d;
  d.n = n, d.tokens = tokens, d.heads = heads, d.dh = dh;
  d.scale = 1.0f / std::sqrt(static_cast<float>(dh));
  d.causal = causal;
  return d;
}

int64_t AttentionSavedBytes(const AttentionShape& s, DType act) {
  ArenaCarver c;
  if (s.fused) {
    c.F32(int64_t{s.n} * s.heads * s.tokens);
  } else {
    c.Take(Scores(s), act);
  }
  return c.bytes();
}

int64_t AttentionScratchBytes(const AttentionShape& s, DType act) {
  if (s.fused) {  // the backward's delta per query
    ArenaCarver c;
    c.F32(int64_t{s.n} * s.heads * s.tokens);
    return c.bytes();
  }
  ArenaCarver c;
  Carve(s, act, nullptr);
  const int64_t qkv = s.rows() * s.dim();
  for (int i = 0; i < 7; ++i) c.Take(qkv, act);
  c.Take(Scores(s), act);
  return c.bytes();
}

void AttentionForward(Backend& backend, const AttentionShape& s, ConstTypedPtr qkv, TypedPtr out,
                      void* saved, void* scratch) {
  if (s.fused) {
    backend.FusedAttentionForward(s.Dims(), qkv, out, ArenaCarver(saved).F32(s.rows() * s.heads));
    return;
  }
  // S = Q K^T, P = softmax(S / sqrt(dh)), O = P V.
  const DType act = out.dtype();
  const int T = s.tokens, dh = s.dh, batch = s.n * s.heads;
  const int64_t tdh = int64_t{T} * dh, tt = int64_t{T} * T;
  const BatchedScratch b = Carve(s, act, scratch);
  const TypedPtr p = ArenaCarver(saved).Take(Scores(s), act);
  GatherHeads(backend, s, qkv, b);
  backend.GemmBatched(false, true, T, T, dh, 1.0f, b.q, dh, tdh, b.k, dh, tdh, 0.0f, p, T, tt,
                      batch);
  backend.SoftmaxRows(int64_t{batch} * T, T, Scale(s), s.causal, p, p);
  backend.GemmBatched(false, false, T, dh, T, 1.0f, p, T, tt, b.v, dh, tdh, 0.0f, b.o, dh, tdh,
                      batch);
  backend.BatchToHeads(s.n, T, s.heads, dh, b.o, out, s.dim());
}

void AttentionBackward(Backend& backend, const AttentionShape& s, ConstTypedPtr qkv,
                       ConstTypedPtr out, const void* saved, ConstTypedPtr dout, TypedPtr dqkv,
                       void* scratch) {
  if (s.fused) {
    backend.FusedAttentionBackward(s.Dims(), qkv, out, ArenaCarver(saved).F32(s.rows() * s.heads),
                                   dout, dqkv, ArenaCarver(scratch).F32(s.rows() * s.heads));
    return;
  }
  // dP = dO V^T, dV = P^T dO, dS = softmax'(dP), dQ = dS K, dK = dS^T Q through the saved P.
  const DType act = dqkv.dtype();
  const int T = s.tokens, dh = s.dh, batch = s.n * s.heads;
  const int64_t d = s.dim(), tdh = int64_t{T} * dh, tt = int64_t{T} * T;
  const BatchedScratch b = Carve(s, act, scratch);
  const TypedPtr p = ArenaCarver(saved).Take(Scores(s), act);
  GatherHeads(backend, s, qkv, b);
  TypedPtr d_o = b.o;
  backend.HeadsToBatch(s.n, T, s.heads, dh, dout, d, d_o);
  backend.GemmBatched(false, true, T, T, dh, 1.0f, d_o, dh, tdh, b.v, dh, tdh, 0.0f, b.dp, T, tt,
                      batch);
  backend.GemmBatched(true, false, T, dh, T, 1.0f, p, T, tt, d_o, dh, tdh, 0.0f, b.dv, dh, tdh,
                      batch);
  backend.SoftmaxRowsBackward(int64_t{batch} * T, T, Scale(s), p, b.dp, b.dp);
  backend.GemmBatched(false, false, T, dh, T, 1.0f, b.dp, T, tt, b.k, dh, tdh, 0.0f, b.dq, dh, tdh,
                      batch);
  backend.GemmBatched(true, false, T, dh, T, 1.0f, b.dp, T, tt, b.q, dh, tdh, 0.0f, b.dk, dh, tdh,
                      batch);
  backend.BatchToHeads(s.n, T, s.heads, dh, b.dq, dqkv, 3 * d);
  backend.BatchToHeads(s.n, T, s.heads, dh, b.dk, dqkv + d, 3 * d);
  backend.BatchToHeads(s.n, T, s.heads, dh, b.dv, dqkv + 2 * d, 3 * d);
}

}  // namespace strait::site
