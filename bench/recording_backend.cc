#include "bench/recording_backend.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "core/status.h"

namespace strait::bench {
namespace {

using site::ConstTypedPtr;
using site::DType;
using site::TypedPtr;

// Elements a strided operand spans: rows x ld for each batch element.
int64_t Span(int rows, int ld, int64_t stride, int batch) {
  return (batch - 1) * stride + int64_t{rows} * ld;
}

int64_t AlignedBytes(int64_t elements, DType t) {
  return (elements * site::SizeOf(t) + 255) / 256 * 256;
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

void RecordingBackend::StartProfiling() {
  seconds_.clear();
  profiling_ = true;
}

std::map<std::string, double> RecordingBackend::StopProfiling() {
  profiling_ = false;
  return std::exchange(seconds_, {});
}

template <typename Op>
void RecordingBackend::Timed(const char* family, Op&& op) {
  if (!profiling_) {
    op();
    return;
  }
  absl::Status s = inner_->Sync();
  const auto start = std::chrono::steady_clock::now();
  op();
  s.Update(inner_->Sync());
  seconds_[family] +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  profile_error_.Update(s);
}

absl::Status RecordingBackend::Sync() {
  absl::Status s = std::exchange(profile_error_, absl::OkStatus());
  s.Update(inner_->Sync());
  return s;
}

void RecordingBackend::CopyToDevice(void* d, const void* s, size_t b) {
  Timed("copies", [&] { inner_->CopyToDevice(d, s, b); });
}
void RecordingBackend::CopyToHost(void* d, const void* s, size_t b) {
  Timed("copies", [&] { inner_->CopyToHost(d, s, b); });
}
void RecordingBackend::CopyOnDevice(void* d, const void* s, size_t b) {
  Timed("copies", [&] { inner_->CopyOnDevice(d, s, b); });
}
void RecordingBackend::Fill(TypedPtr x, int64_t n, float v) {
  Timed("element-wise", [&] { inner_->Fill(x, n, v); });
}
void RecordingBackend::Convert(int64_t n, ConstTypedPtr x, TypedPtr y) {
  Timed("copies", [&] { inner_->Convert(n, x, y); });
}

void RecordingBackend::Gemm(bool ta, bool tb, int m, int n, int k, float alpha, ConstTypedPtr a,
                            int lda, ConstTypedPtr b, int ldb, float beta, TypedPtr c, int ldc,
                            const site::GemmEpilogue& e) {
  Record({ta, tb, m, n, k, lda, ldb, ldc, 0, 0, 0, 1, beta, a.dtype(), b.dtype(), c.dtype()});
  Timed("products", [&] { inner_->Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, e); });
}

void RecordingBackend::GemmBatched(bool ta, bool tb, int m, int n, int k, float alpha,
                                   ConstTypedPtr a, int lda, int64_t sa, ConstTypedPtr b, int ldb,
                                   int64_t sb, float beta, TypedPtr c, int ldc, int64_t sc,
                                   int batch) {
  Record(
      {ta, tb, m, n, k, lda, ldb, ldc, sa, sb, sc, batch, beta, a.dtype(), b.dtype(), c.dtype()});
  Timed("attention", [&] {
    inner_->GemmBatched(ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, batch);
  });
}

void RecordingBackend::FusedAttentionForward(const site::AttentionDims& d, ConstTypedPtr qkv,
                                             TypedPtr out, float* lse) {
  const int t = d.tokens, dh = d.dh, batch = d.n * d.heads;
  const int64_t tdh = int64_t{t} * dh, tt = int64_t{t} * t;
  const DType a = out.dtype();
  Record({false, true, t, t, dh, dh, dh, t, tdh, tdh, tt, batch, 0.0f, a, a, a});   // S = Q K^T
  Record({false, false, t, dh, t, t, dh, dh, tt, tdh, tdh, batch, 0.0f, a, a, a});  // O = P V
  Timed("attention", [&] { inner_->FusedAttentionForward(d, qkv, out, lse); });
}

void RecordingBackend::FusedAttentionBackward(const site::AttentionDims& d, ConstTypedPtr qkv,
                                              ConstTypedPtr out, const float* lse,
                                              ConstTypedPtr dout, TypedPtr dqkv, float* delta) {
  const int t = d.tokens, dh = d.dh, batch = d.n * d.heads;
  const int64_t tdh = int64_t{t} * dh, tt = int64_t{t} * t;
  const DType a = dqkv.dtype();
  Record({false, true, t, t, dh, dh, dh, t, tdh, tdh, tt, batch, 0.0f, a, a, a});   // dP = dO V^T
  Record({true, false, t, dh, t, t, dh, dh, tt, tdh, tdh, batch, 0.0f, a, a, a});   // dV = P^T dO
  Record({false, false, t, dh, t, t, dh, dh, tt, tdh, tdh, batch, 0.0f, a, a, a});  // dQ = dS K
  Record({true, false, t, dh, t, t, dh, dh, tt, tdh, tdh, batch, 0.0f, a, a, a});   // dK = dS^T Q
  Timed("attention", [&] { inner_->FusedAttentionBackward(d, qkv, out, lse, dout, dqkv, delta); });
}

void RecordingBackend::BiasActivation(int64_t rows, int cols, const float* bias,
                                      site::ActivationOp act, TypedPtr x, TypedPtr y) {
  Timed("element-wise", [&] { inner_->BiasActivation(rows, cols, bias, act, x, y); });
}
void RecordingBackend::ActivationBackward(int64_t n, site::ActivationOp act, ConstTypedPtr x,
                                          ConstTypedPtr dy, TypedPtr dx) {
  Timed("element-wise", [&] { inner_->ActivationBackward(n, act, x, dy, dx); });
}
void RecordingBackend::ColumnSum(int64_t rows, int cols, ConstTypedPtr x, int64_t ldx, float beta,
                                 float* out) {
  Timed("element-wise", [&] { inner_->ColumnSum(rows, cols, x, ldx, beta, out); });
}
void RecordingBackend::LayerNormForward(int64_t rows, int dim, ConstTypedPtr x, const float* gamma,
                                        const float* beta, TypedPtr y, float* mean, float* rstd) {
  Timed("normalisation",
        [&] { inner_->LayerNormForward(rows, dim, x, gamma, beta, y, mean, rstd); });
}
void RecordingBackend::ResidualLayerNormForward(int64_t rows, int dim, ConstTypedPtr x,
                                                ConstTypedPtr branch, TypedPtr r,
                                                const float* gamma, const float* beta, TypedPtr y,
                                                float* mean, float* rstd) {
  Timed("normalisation", [&] {
    inner_->ResidualLayerNormForward(rows, dim, x, branch, r, gamma, beta, y, mean, rstd);
  });
}
void RecordingBackend::LayerNormBackward(int64_t rows, int dim, ConstTypedPtr x, const float* gamma,
                                         const float* mean, const float* rstd, ConstTypedPtr dy,
                                         TypedPtr dx, float* dgamma, float* dbeta) {
  Timed("normalisation",
        [&] { inner_->LayerNormBackward(rows, dim, x, gamma, mean, rstd, dy, dx, dgamma, dbeta); });
}
void RecordingBackend::RmsNormForward(int64_t rows, int dim, float eps, ConstTypedPtr x,
                                      const float* gamma, TypedPtr y, float* rstd) {
  Timed("normalisation", [&] { inner_->RmsNormForward(rows, dim, eps, x, gamma, y, rstd); });
}
void RecordingBackend::RmsNormBackward(int64_t rows, int dim, ConstTypedPtr x, const float* gamma,
                                       const float* rstd, ConstTypedPtr dy, TypedPtr dx,
                                       float* dgamma) {
  Timed("normalisation",
        [&] { inner_->RmsNormBackward(rows, dim, x, gamma, rstd, dy, dx, dgamma); });
}
void RecordingBackend::Rotary(int64_t rows, int tokens, int heads, int dh, double theta,
                              bool inverse, TypedPtr x, int64_t ldx) {
  Timed("element-wise", [&] { inner_->Rotary(rows, tokens, heads, dh, theta, inverse, x, ldx); });
}
void RecordingBackend::SwiGluForward(int64_t rows, int f, ConstTypedPtr gate_up, TypedPtr y) {
  Timed("element-wise", [&] { inner_->SwiGluForward(rows, f, gate_up, y); });
}
void RecordingBackend::SwiGluBackward(int64_t rows, int f, ConstTypedPtr gate_up, ConstTypedPtr dy,
                                      TypedPtr dgate_up) {
  Timed("element-wise", [&] { inner_->SwiGluBackward(rows, f, gate_up, dy, dgate_up); });
}
void RecordingBackend::RepeatKvHeads(int64_t rows, int heads, int kv_heads, int dh,
                                     ConstTypedPtr qkv, TypedPtr full) {
  Timed("copies", [&] { inner_->RepeatKvHeads(rows, heads, kv_heads, dh, qkv, full); });
}
void RecordingBackend::SumKvHeads(int64_t rows, int heads, int kv_heads, int dh,
                                  ConstTypedPtr dfull, TypedPtr dqkv) {
  Timed("copies", [&] { inner_->SumKvHeads(rows, heads, kv_heads, dh, dfull, dqkv); });
}
void RecordingBackend::SoftmaxRows(int64_t rows, int cols, float scale, bool causal,
                                   ConstTypedPtr x, TypedPtr y) {
  Timed("attention", [&] { inner_->SoftmaxRows(rows, cols, scale, causal, x, y); });
}
void RecordingBackend::SoftmaxRowsBackward(int64_t rows, int cols, float scale, ConstTypedPtr y,
                                           ConstTypedPtr dy, TypedPtr dx) {
  Timed("attention", [&] { inner_->SoftmaxRowsBackward(rows, cols, scale, y, dy, dx); });
}
void RecordingBackend::ClassifierLoss(int64_t rows, int classes, TypedPtr logits,
                                      const int32_t* labels, float grad_scale, float* loss,
                                      int32_t* correct) {
  Timed("loss",
        [&] { inner_->ClassifierLoss(rows, classes, logits, labels, grad_scale, loss, correct); });
}
void RecordingBackend::Dropout(int64_t n, float p, uint64_t key, int64_t offset, ConstTypedPtr x,
                               TypedPtr y) {
  Timed("element-wise", [&] { inner_->Dropout(n, p, key, offset, x, y); });
}
void RecordingBackend::Axpy(int64_t n, float alpha, ConstTypedPtr x, TypedPtr y) {
  Timed("element-wise", [&] { inner_->Axpy(n, alpha, x, y); });
}
void RecordingBackend::Axpby(int64_t n, float alpha, ConstTypedPtr x, float beta, TypedPtr y) {
  Timed("element-wise", [&] { inner_->Axpby(n, alpha, x, beta, y); });
}
void RecordingBackend::Copy2D(int64_t rows, int cols, ConstTypedPtr src, int64_t ld_src,
                              TypedPtr dst, int64_t ld_dst) {
  Timed("copies", [&] { inner_->Copy2D(rows, cols, src, ld_src, dst, ld_dst); });
}
void RecordingBackend::ExtractPatches(int n, int channels, int height, int width, int p,
                                      ConstTypedPtr images, TypedPtr patches) {
  Timed("copies", [&] { inner_->ExtractPatches(n, channels, height, width, p, images, patches); });
}
void RecordingBackend::HeadsToBatch(int n, int tokens, int heads, int dh, ConstTypedPtr x,
                                    int64_t ldx, TypedPtr y) {
  Timed("copies", [&] { inner_->HeadsToBatch(n, tokens, heads, dh, x, ldx, y); });
}
void RecordingBackend::BatchToHeads(int n, int tokens, int heads, int dh, ConstTypedPtr y,
                                    TypedPtr x, int64_t ldx) {
  Timed("copies", [&] { inner_->BatchToHeads(n, tokens, heads, dh, y, x, ldx); });
}
void RecordingBackend::EmbeddingLookup(int64_t rows, int dim, int vocab, const float* ids,
                                       const float* table, TypedPtr y) {
  Timed("copies", [&] { inner_->EmbeddingLookup(rows, dim, vocab, ids, table, y); });
}
void RecordingBackend::EmbeddingBackward(int64_t rows, int dim, int vocab, const float* ids,
                                         ConstTypedPtr dy, float* dtable) {
  Timed("copies", [&] { inner_->EmbeddingBackward(rows, dim, vocab, ids, dy, dtable); });
}
void RecordingBackend::SgdUpdate(int64_t n, float lr, float momentum, float wd, float scale,
                                 float* param, const float* grad, float* velocity, TypedPtr copy) {
  Timed("optimizer",
        [&] { inner_->SgdUpdate(n, lr, momentum, wd, scale, param, grad, velocity, copy); });
}
void RecordingBackend::AdamWUpdate(int64_t n, float lr, float b1, float b2, float eps, float wd,
                                   float bias1, float bias2, float scale, float* param,
                                   const float* grad, float* m, float* v, TypedPtr copy) {
  Timed("optimizer", [&] {
    inner_->AdamWUpdate(n, lr, b1, b2, eps, wd, bias1, bias2, scale, param, grad, m, v, copy);
  });
}
double RecordingBackend::SumSquares(int64_t n, const float* x) {
  double result = 0.0;
  Timed("optimizer", [&] { result = inner_->SumSquares(n, x); });
  return result;
}

absl::StatusOr<GemmReplay> GemmReplay::Create(std::vector<GemmCall> calls, site::Backend* backend) {
  // Each call gets its own operands, as in the real step (its weights and gradients are distinct
  // tensors): operands shared across calls would stay in cache and flatter the ceiling. Past 1 GiB
  // (far beyond any cache) the operands wrap around to the arena's start: a GPU model's attention
  // products alone would otherwise take tens of GiB.
  constexpr int64_t kWrapBytes = int64_t{1} << 30;
  GemmReplay r;
  int64_t next = 0, total = 0;
  for (const GemmCall& g : calls) {
    const int64_t a =
        AlignedBytes(Span(g.trans_a ? g.k : g.m, g.lda, g.stride_a, g.batch), g.a_type);
    const int64_t b =
        AlignedBytes(Span(g.trans_b ? g.n : g.k, g.ldb, g.stride_b, g.batch), g.b_type);
    const int64_t c = AlignedBytes(Span(g.m, g.ldc, g.stride_c, g.batch), g.c_type);
    if (next > 0 && next + a + b + c > kWrapBytes) next = 0;
    r.offsets_.push_back({next, next + a, next + a + b});
    next += a + b + c;
    total = std::max(total, next);
  }
  r.calls_ = std::move(calls);
  r.backend_ = backend;
  STRAIT_ASSIGN_OR_RETURN(r.arena_,
                          site::DeviceBuffer::Create(backend, std::max<int64_t>(total, 256)));
  // 0.5 in bf16 has the bits 0x3f00: a fill of the arena as bf16 reads as small normal floats in
  // f32 too (0x3f003f00), never NaN.
  backend->Fill(r.arena_.typed(DType::kBf16), total / 2, 0.5f);
  return r;
}

absl::Status GemmReplay::Run() {
  char* base = static_cast<char*>(arena_.data());
  for (size_t i = 0; i < calls_.size(); ++i) {
    const GemmCall& g = calls_[i];
    const ConstTypedPtr a(base + offsets_[i][0], g.a_type), b(base + offsets_[i][1], g.b_type);
    const TypedPtr c(base + offsets_[i][2], g.c_type);
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
  char* base = static_cast<char*>(arena_.data());
  for (size_t j = 0; j < calls_.size(); ++j) {
    const GemmCall& g = calls_[j];
    if (g.a_type != DType::kF32 || g.b_type != DType::kF32 || g.c_type != DType::kF32) continue;
    const auto* a = reinterpret_cast<const float*>(base + offsets_[j][0]);
    const auto* b = reinterpret_cast<const float*>(base + offsets_[j][1]);
    auto* c = reinterpret_cast<float*>(base + offsets_[j][2]);
    for (int i = 0; i < g.batch; ++i) {
      cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans,
                  g.trans_b ? CblasTrans : CblasNoTrans, g.m, g.n, g.k, 1.0f, a + i * g.stride_a,
                  g.lda, b + i * g.stride_b, g.ldb, g.beta, c + i * g.stride_c, g.ldc);
    }
  }
  openblas_set_num_threads(1);
}

}  // namespace strait::bench
