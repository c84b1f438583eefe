// Benchmark helpers: a Backend decorator that records the matrix products a workload performs,
// and a replay of those products alone (the GEMM library's ceiling on the same shapes).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "site/backend/backend.h"

namespace strait::bench {

struct GemmCall {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  int lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int batch = 1;
  float beta = 0.0f;
  double Flops() const { return 2.0 * m * n * k * batch; }
};

// Forwards every call to `inner` (which must outlive it); between StartRecording and
// StopRecording it also logs Gemm and GemmBatched calls, and a fused attention pass as the batched
// products the unfused pass performs (so that a step's FLOPs and its ceiling do not depend on the
// attention kernel). Same threading contract as Backend.
class RecordingBackend final : public site::Backend {
 public:
  explicit RecordingBackend(site::Backend* inner) : inner_(inner) {}
  void StartRecording();
  std::vector<GemmCall> StopRecording();

  std::string Name() const override { return inner_->Name(); }
  absl::StatusOr<void*> Allocate(size_t bytes) override { return inner_->Allocate(bytes); }
  void Free(void* p) override { inner_->Free(p); }
  void CopyToDevice(void* d, const void* s, size_t b) override { inner_->CopyToDevice(d, s, b); }
  void CopyToHost(void* d, const void* s, size_t b) override { inner_->CopyToHost(d, s, b); }
  void CopyOnDevice(void* d, const void* s, size_t b) override { inner_->CopyOnDevice(d, s, b); }
  void Fill(float* x, int64_t n, float v) override { inner_->Fill(x, n, v); }
  absl::Status Sync() override { return inner_->Sync(); }
  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override;
  void GemmBatched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                   int64_t sa, const float* b, int ldb, int64_t sb, float beta, float* c, int ldc,
                   int64_t sc, int batch) override;
  bool FusedAttention(int dh) const override { return inner_->FusedAttention(dh); }
  void FusedAttentionForward(int batch, int tokens, int dh, float scale, bool causal,
                             const float* q, const float* k, const float* v, float* o,
                             float* lse) override;
  void FusedAttentionBackward(int batch, int tokens, int dh, float scale, bool causal,
                              const float* q, const float* k, const float* v, const float* o,
                              const float* lse, const float* d_o, float* delta, float* dq,
                              float* dk, float* dv) override;
  void BiasActivation(int64_t rows, int cols, const float* bias, site::ActivationOp act, float* x,
                      float* y) override {
    inner_->BiasActivation(rows, cols, bias, act, x, y);
  }
  void ActivationBackward(int64_t n, site::ActivationOp act, const float* x, const float* dy,
                          float* dx) override {
    inner_->ActivationBackward(n, act, x, dy, dx);
  }
  void ColumnSum(int64_t rows, int cols, const float* x, int64_t ldx, float beta,
                 float* out) override {
    inner_->ColumnSum(rows, cols, x, ldx, beta, out);
  }
  void LayerNormForward(int64_t rows, int dim, const float* x, const float* gamma,
                        const float* beta, float* y, float* mean, float* rstd) override {
    inner_->LayerNormForward(rows, dim, x, gamma, beta, y, mean, rstd);
  }
  void LayerNormBackward(int64_t rows, int dim, const float* x, const float* gamma,
                         const float* mean, const float* rstd, const float* dy, float* dx,
                         float* dgamma, float* dbeta) override {
    inner_->LayerNormBackward(rows, dim, x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  }
  void SoftmaxRows(int64_t rows, int cols, float scale, bool causal, const float* x,
                   float* y) override {
    inner_->SoftmaxRows(rows, cols, scale, causal, x, y);
  }
  void EmbeddingLookup(int64_t rows, int dim, int vocab, const float* ids, const float* table,
                       float* y) override {
    inner_->EmbeddingLookup(rows, dim, vocab, ids, table, y);
  }
  void EmbeddingBackward(int64_t rows, int dim, int vocab, const float* ids, const float* dy,
                         float* dtable) override {
    inner_->EmbeddingBackward(rows, dim, vocab, ids, dy, dtable);
  }
  void SoftmaxRowsBackward(int64_t rows, int cols, float scale, const float* y, const float* dy,
                           float* dx) override {
    inner_->SoftmaxRowsBackward(rows, cols, scale, y, dy, dx);
  }
  void CrossEntropy(int64_t rows, int classes, const float* logits, const int32_t* labels,
                    float grad_scale, float* loss, int32_t* correct, float* dlogits) override {
    inner_->CrossEntropy(rows, classes, logits, labels, grad_scale, loss, correct, dlogits);
  }
  void Dropout(int64_t n, float p, uint64_t key, int64_t offset, const float* x,
               float* y) override {
    inner_->Dropout(n, p, key, offset, x, y);
  }
  void Axpy(int64_t n, float alpha, const float* x, float* y) override {
    inner_->Axpy(n, alpha, x, y);
  }
  void Axpby(int64_t n, float alpha, const float* x, float beta, float* y) override {
    inner_->Axpby(n, alpha, x, beta, y);
  }
  void Copy2D(int64_t rows, int cols, const float* src, int64_t ld_src, float* dst,
              int64_t ld_dst) override {
    inner_->Copy2D(rows, cols, src, ld_src, dst, ld_dst);
  }
  void ExtractPatches(int n, int channels, int height, int width, int p, const float* images,
                      float* patches) override {
    inner_->ExtractPatches(n, channels, height, width, p, images, patches);
  }
  void HeadsToBatch(int n, int tokens, int heads, int dh, const float* x, int64_t ldx,
                    float* y) override {
    inner_->HeadsToBatch(n, tokens, heads, dh, x, ldx, y);
  }
  void BatchToHeads(int n, int tokens, int heads, int dh, const float* y, float* x,
                    int64_t ldx) override {
    inner_->BatchToHeads(n, tokens, heads, dh, y, x, ldx);
  }
  void SgdUpdate(int64_t n, float lr, float momentum, float wd, float scale, float* param,
                 const float* grad, float* velocity) override {
    inner_->SgdUpdate(n, lr, momentum, wd, scale, param, grad, velocity);
  }
  void AdamWUpdate(int64_t n, float lr, float b1, float b2, float eps, float wd, float bias1,
                   float bias2, float scale, float* param, const float* grad, float* m,
                   float* v) override {
    inner_->AdamWUpdate(n, lr, b1, b2, eps, wd, bias1, bias2, scale, param, grad, m, v);
  }
  double SumSquares(int64_t n, const float* x) override { return inner_->SumSquares(n, x); }

 private:
  site::Backend* inner_;
  bool recording_ = false;
  std::vector<GemmCall> calls_;
};

// The recorded calls, each on its own operands in one arena of `backend` (which must outlive the
// replay).
class GemmReplay {
 public:
  static absl::StatusOr<GemmReplay> Create(std::vector<GemmCall> calls, site::Backend* backend);
  // Runs every call once, in order, and waits for the device.
  absl::Status Run();
  // CPU only: runs every call as one plain cblas_sgemm per matrix, OpenBLAS threading itself with
  // `threads` threads (restored to 1, the CPU backend's setting, afterwards).
  void RunPlainOpenBlas(int threads);

 private:
  std::vector<GemmCall> calls_;
  std::vector<std::array<int64_t, 3>> offsets_;  // per call: A, B, C offsets in arena_ (floats)
  site::Backend* backend_ = nullptr;
  site::DeviceBuffer arena_;
};

}  // namespace strait::bench
