#include "bench/recording_backend.h"

#include <cblas.h>

#include <algorithm>
#include <utility>

#include "core/status.h"

namespace strait::bench {
namespace {

// Floats a strided operand spans: rows x ld for each batch element.
int64_t Span(int rows, int ld, int64_t stride, int batch) {
  return (batch - 1) * stride + int64_t{rows} * ld;
}

}  // namespace

void RecordingBackend::StartRecording() {
  calls_.clear();
  recording_ = true;
}

std::vector<GemmCall> RecordingBackend::StopRecording() {
  recording_ = false;
  return std::exchange(calls_, {});
}

void RecordingBackend::Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
                            int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (recording_) calls_.push_back({ta, tb, m, n, k, lda, ldb, ldc, 0, 0, 0, 1, beta});
  inner_->Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void RecordingBackend::GemmBatched(bool ta, bool tb, int m, int n, int k, float alpha,
                                   const float* a, int lda, int64_t sa, const float* b, int ldb,
                                   int64_t sb, float beta, float* c, int ldc, int64_t sc,
                                   int batch) {
  if (recording_) calls_.push_back({ta, tb, m, n, k, lda, ldb, ldc, sa, sb, sc, batch, beta});
  inner_->GemmBatched(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
}

void RecordingBackend::FusedAttentionForward(int batch, int tokens, int dh, float scale,
                                             bool causal, const float* q, const float* k,
                                             const float* v, float* o, float* lse) {
  if (recording_) {
    const int t = tokens;
    const int64_t tdh = int64_t{t} * dh, tt = int64_t{t} * t;
    calls_.push_back({false, true, t, t, dh, dh, dh, t, tdh, tdh, tt, batch, 0.0f});   // S = Q K^T
    calls_.push_back({false, false, t, dh, t, t, dh, dh, tt, tdh, tdh, batch, 0.0f});  // O = P V
  }
  inner_->FusedAttentionForward(batch, tokens, dh, scale, causal, q, k, v, o, lse);
}

void RecordingBackend::FusedAttentionBackward(int batch, int tokens, int dh, float scale,
                                              bool causal, const float* q, const float* k,
                                              const float* v, const float* o, const float* lse,
                                              const float* d_o, float* delta, float* dq, float* dk,
                                              float* dv) {
  if (recording_) {
    const int t = tokens;
    const int64_t tdh = int64_t{t} * dh, tt = int64_t{t} * t;
    calls_.push_back({false, true, t, t, dh, dh, dh, t, tdh, tdh, tt, batch, 0.0f});  // dP = dO V^T
    calls_.push_back({true, false, t, dh, t, t, dh, dh, tt, tdh, tdh, batch, 0.0f});  // dV = P^T dO
    calls_.push_back({false, false, t, dh, t, t, dh, dh, tt, tdh, tdh, batch, 0.0f});  // dQ = dS K
    calls_.push_back({true, false, t, dh, t, t, dh, dh, tt, tdh, tdh, batch, 0.0f});  // dK = dS^T Q
  }
  inner_->FusedAttentionBackward(batch, tokens, dh, scale, causal, q, k, v, o, lse, d_o, delta, dq,
                                 dk, dv);
}

absl::StatusOr<GemmReplay> GemmReplay::Create(std::vector<GemmCall> calls, site::Backend* backend) {
  // Each call gets its own operands, as in the real step (its weights and gradients are distinct
  // tensors): operands shared across calls would stay in cache and flatter the ceiling. Past 1 GiB
  // (far beyond any cache) the operands wrap around to the arena's start: a GPU model's attention
  // products alone would otherwise take tens of GiB.
  constexpr int64_t kWrapFloats = int64_t{1} << 28;
  GemmReplay r;
  int64_t next = 0, total = 0;
  for (const GemmCall& g : calls) {
    const int64_t a = Span(g.trans_a ? g.k : g.m, g.lda, g.stride_a, g.batch);
    const int64_t b = Span(g.trans_b ? g.n : g.k, g.ldb, g.stride_b, g.batch);
    const int64_t c = Span(g.m, g.ldc, g.stride_c, g.batch);
    if (next > 0 && next + a + b + c > kWrapFloats) next = 0;
    r.offsets_.push_back({next, next + a, next + a + b});
    next += a + b + c;
    total = std::max(total, next);
  }
  r.calls_ = std::move(calls);
  r.backend_ = backend;
  STRAIT_ASSIGN_OR_RETURN(
      r.arena_, site::DeviceBuffer::Create(backend, sizeof(float) * std::max<int64_t>(total, 1)));
  backend->Fill(r.arena_.f32(), total, 0.5f);
  return r;
}

absl::Status GemmReplay::Run() {
  for (size_t i = 0; i < calls_.size(); ++i) {
    const GemmCall& g = calls_[i];
    float* a = arena_.f32() + offsets_[i][0];
    float* b = arena_.f32() + offsets_[i][1];
    float* c = arena_.f32() + offsets_[i][2];
    if (g.stride_a == 0 && g.stride_b == 0 && g.stride_c == 0 && g.batch == 1) {
      backend_->Gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, a, g.lda, b, g.ldb, g.beta, c,
                     g.ldc);
    } else {
      backend_->GemmBatched(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, a, g.lda, g.stride_a, b,
                            g.ldb, g.stride_b, g.beta, c, g.ldc, g.stride_c, g.batch);
    }
  }
  return backend_->Sync();
}

void GemmReplay::RunPlainOpenBlas(int threads) {
  openblas_set_num_threads(threads);
  for (size_t j = 0; j < calls_.size(); ++j) {
    const GemmCall& g = calls_[j];
    const float* a = arena_.f32() + offsets_[j][0];
    const float* b = arena_.f32() + offsets_[j][1];
    float* c = arena_.f32() + offsets_[j][2];
    for (int i = 0; i < g.batch; ++i) {
      cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
                  g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 1.0f, a + i * g.stride_a,
                  g.lda, b + i * g.stride_b, g.ldb, g.beta, c + i * g.stride_c, g.ldc);
    }
  }
  openblas_set_num_threads(1);
}

}  // namespace strait::bench
