#include "site/nn/attention.h"

#include <cmath>

namespace strait::site {
namespace {

// Saved: Q, K, V [n, H, T, dh] each, then P [n, H, T, T] (fused: O [n, H, T, dh] and the
// log-sum-exp [n, H, T]).
template <typename T>  // float or const float
struct Saved {
  T *q, *k, *v, *p;
  T *o, *lse;
};

template <typename T>
Saved<T> SavedViews(const AttentionShape& s, T* base) {
  const int64_t qkv = s.rows() * s.dim();
  return {base, base + qkv, base + 2 * qkv, base + 3 * qkv, base + 3 * qkv, base + 4 * qkv};
}

float Scale(const AttentionShape& s) { return 1.0f / std::sqrt(static_cast<float>(s.dh)); }

// dP = dO V^T, dV = P^T dO, dS = softmax'(dP), dQ = dS K, dK = dS^T Q through the saved P.
void BatchedProductsBackward(Backend& backend, const AttentionShape& s,
                             const Saved<const float>& sv, const float* d_o, float* dp, float* dq,
                             float* dk, float* dv) {
  const int T = s.tokens, dh = s.dh, batch = s.n * s.heads;
  const int64_t tdh = int64_t{T} * dh, tt = int64_t{T} * T;
  backend.GemmBatched(false, true, T, T, dh, 1.0f, d_o, dh, tdh, sv.v, dh, tdh, 0.0f, dp, T, tt,
                      batch);
  backend.GemmBatched(true, false, T, dh, T, 1.0f, sv.p, T, tt, d_o, dh, tdh, 0.0f, dv, dh, tdh,
                      batch);
  backend.SoftmaxRowsBackward(int64_t{batch} * T, T, Scale(s), sv.p, dp, dp);
  backend.GemmBatched(false, false, T, dh, T, 1.0f, dp, T, tt, sv.k, dh, tdh, 0.0f, dq, dh, tdh,
                      batch);
  backend.GemmBatched(true, false, T, dh, T, 1.0f, dp, T, tt, sv.q, dh, tdh, 0.0f, dk, dh, tdh,
                      batch);
}

}  // namespace

int64_t AttentionSavedFloats(const AttentionShape& s) {
  if (s.fused) return 4 * s.rows() * s.dim() + int64_t{s.n} * s.heads * s.tokens;
  return 3 * s.rows() * s.dim() + int64_t{s.n} * s.heads * s.tokens * s.tokens;
}

int64_t AttentionScratchFloats(const AttentionShape& s) {
  // Backward: dO, dQ, dK, dV [n, H, T, dh] and dP [n, H, T, T] (fused: a delta per query); the
  // forward needs only O (fused: nothing).
  if (s.fused) return 4 * s.rows() * s.dim() + int64_t{s.n} * s.heads * s.tokens;
  return 4 * s.rows() * s.dim() + int64_t{s.n} * s.heads * s.tokens * s.tokens;
}

void AttentionForward(Backend& backend, const AttentionShape& s, const float* qkv, float* out,
                      float* saved, float* scratch) {
  const int T = s.tokens, dh = s.dh, batch = s.n * s.heads;
  const int64_t d = s.dim(), tdh = int64_t{T} * dh, tt = int64_t{T} * T;
  Saved<float> sv = SavedViews(s, saved);
  backend.HeadsToBatch(s.n, T, s.heads, dh, qkv, 3 * d, sv.q);
  backend.HeadsToBatch(s.n, T, s.heads, dh, qkv + d, 3 * d, sv.k);
  backend.HeadsToBatch(s.n, T, s.heads, dh, qkv + 2 * d, 3 * d, sv.v);
  if (s.fused) {
    backend.FusedAttentionForward(batch, T, dh, Scale(s), s.causal, sv.q, sv.k, sv.v, sv.o, sv.lse);
    backend.BatchToHeads(s.n, T, s.heads, dh, sv.o, out, d);
    return;
  }
  // S = Q K^T, P = softmax(S / sqrt(dh)), O = P V.
  backend.GemmBatched(false, true, T, T, dh, 1.0f, sv.q, dh, tdh, sv.k, dh, tdh, 0.0f, sv.p, T, tt,
                      batch);
  backend.SoftmaxRows(int64_t{batch} * T, T, Scale(s), s.causal, sv.p, sv.p);
  float* o = scratch;
  backend.GemmBatched(false, false, T, dh, T, 1.0f, sv.p, T, tt, sv.v, dh, tdh, 0.0f, o, dh, tdh,
                      batch);
  backend.BatchToHeads(s.n, T, s.heads, dh, o, out, d);
}

void AttentionBackward(Backend& backend, const AttentionShape& s, const float* saved,
                       const float* dout, float* dqkv, float* scratch) {
  const int T = s.tokens, dh = s.dh, batch = s.n * s.heads;
  const int64_t d = s.dim(), qkv = s.rows() * d;
  Saved<const float> sv = SavedViews(s, saved);
  float* d_o = scratch;
  float* dq = d_o + qkv;
  float* dk = dq + qkv;
  float* dv = dk + qkv;
  float* dp = dv + qkv;  // [n, H, T, T], or fused the delta per query [n, H, T]
  backend.HeadsToBatch(s.n, T, s.heads, dh, dout, d, d_o);
  if (s.fused) {
    backend.FusedAttentionBackward(batch, T, dh, Scale(s), s.causal, sv.q, sv.k, sv.v, sv.o, sv.lse,
                                   d_o, dp, dq, dk, dv);
  } else {
    BatchedProductsBackward(backend, s, sv, d_o, dp, dq, dk, dv);
  }
  backend.BatchToHeads(s.n, T, s.heads, dh, dq, dqkv, 3 * d);
  backend.BatchToHeads(s.n, T, s.heads, dh, dk, dqkv + d, 3 * d);
  backend.BatchToHeads(s.n, T, s.heads, dh, dv, dqkv + 2 * d, 3 * d);
}

}  // namespace strait::site
