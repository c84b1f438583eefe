// Benchmark helpers: a Backend decorator that records the matrix products a workload performs and,
// when asked, times every op by kernel family; and a replay of the recorded products alone (the
// GEMM library's ceiling on the same shapes and types).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compression/chain_spec.h"
#include "site/backend/backend.h"

namespace strait::bench {

struct GemmCall {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  int lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  int batch = 1;
  float beta = 0.0f;
  site::DType a_type = site::DType::kF32, b_type = site::DType::kF32, c_type = site::DType::kF32;
  double Flops() const { return 2.0 * m * n * k * batch; }
};

// The families a step's time is split into (the order they print in).
inline constexpr std::array<const char*, 7> kKernelFamilies = {
    "products", "attention", "normalisation", "element-wise", "loss", "optimizer", "copies"};

// Forwards every call to `inner` (which must outlive it). Between StartRecording and StopRecording
// it also logs Gemm and GemmBatched calls, and a fused attention pass as the batched products the
// unfused pass performs (so that a step's FLOPs and its ceiling do not depend on the attention
// kernel). While profiling, every op waits for the device before and after it and adds its time to
// its family (which slows the step: profile a step of its own). Same threading contract as
// Backend.
class RecordingBackend final : public site::Backend {
 public:
  explicit RecordingBackend(site::Backend* inner) : inner_(inner) {}
  void StartRecording();
  std::vector<GemmCall> StopRecording();
  void StartProfiling();
  // Seconds per family since StartProfiling.
  std::map<std::string, double> StopProfiling();

  using Backend::Gemm;
  std::string Name() const override { return inner_->Name(); }
  site::DType activation_dtype() const override { return inner_->activation_dtype(); }
  absl::StatusOr<void*> Allocate(size_t bytes) override { return inner_->Allocate(bytes); }
  void Free(void* p) override { inner_->Free(p); }
  void CopyToDevice(void* d, const void* s, size_t b) override;
  void CopyToHost(void* d, const void* s, size_t b) override;
  void CopyOnDevice(void* d, const void* s, size_t b) override;
  void Fill(site::TypedPtr x, int64_t n, float v) override;
  void Convert(int64_t n, site::ConstTypedPtr x, site::TypedPtr y) override;
  absl::Status Sync() override;
  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, site::ConstTypedPtr a, int lda,
            site::ConstTypedPtr b, int ldb, float beta, site::TypedPtr c, int ldc,
            const site::GemmEpilogue& e) override;
  void GemmBatched(bool ta, bool tb, int m, int n, int k, float alpha, site::ConstTypedPtr a,
                   int lda, int64_t sa, site::ConstTypedPtr b, int ldb, int64_t sb, float beta,
                   site::TypedPtr c, int ldc, int64_t sc, int batch) override;
  bool FusedAttention(int dh) const override { return inner_->FusedAttention(dh); }
  void FusedAttentionForward(const site::AttentionDims& d, site::ConstTypedPtr qkv,
                             site::TypedPtr out, float* lse) override;
  void FusedAttentionBackward(const site::AttentionDims& d, site::ConstTypedPtr qkv,
                              site::ConstTypedPtr out, const float* lse, site::ConstTypedPtr dout,
                              site::TypedPtr dqkv, float* delta) override;
  void BiasActivation(int64_t rows, int cols, const float* bias, site::ActivationOp act,
                      site::TypedPtr x, site::TypedPtr y) override;
  void ActivationBackward(int64_t n, site::ActivationOp act, site::ConstTypedPtr x,
                          site::ConstTypedPtr dy, site::TypedPtr dx) override;
  void ColumnSum(int64_t rows, int cols, site::ConstTypedPtr x, int64_t ldx, float beta,
                 float* out) override;
  void LayerNormForward(int64_t rows, int dim, site::ConstTypedPtr x, const float* gamma,
                        const float* beta, site::TypedPtr y, float* mean, float* rstd) override;
  void ResidualLayerNormForward(int64_t rows, int dim, site::ConstTypedPtr x,
                                site::ConstTypedPtr branch, site::TypedPtr r, const float* gamma,
                                const float* beta, site::TypedPtr y, float* mean,
                                float* rstd) override;
  void LayerNormBackward(int64_t rows, int dim, site::ConstTypedPtr x, const float* gamma,
                         const float* mean, const float* rstd, site::ConstTypedPtr dy,
                         site::TypedPtr dx, float* dgamma, float* dbeta) override;
  void RmsNormForward(int64_t rows, int dim, float eps, site::ConstTypedPtr x, const float* gamma,
                      site::TypedPtr y, float* rstd) override;
  void RmsNormBackward(int64_t rows, int dim, site::ConstTypedPtr x, const float* gamma,
                       const float* rstd, site::ConstTypedPtr dy, site::TypedPtr dx,
                       float* dgamma) override;
  void Rotary(int64_t rows, int tokens, int heads, int dh, double theta, bool inverse,
              site::TypedPtr x, int64_t ldx) override;
  void SwiGluForward(int64_t rows, int f, site::ConstTypedPtr gate_up, site::TypedPtr y) override;
  void SwiGluBackward(int64_t rows, int f, site::ConstTypedPtr gate_up, site::ConstTypedPtr dy,
                      site::TypedPtr dgate_up) override;
  void RepeatKvHeads(int64_t rows, int heads, int kv_heads, int dh, site::ConstTypedPtr qkv,
                     site::TypedPtr full) override;
  void SumKvHeads(int64_t rows, int heads, int kv_heads, int dh, site::ConstTypedPtr dfull,
                  site::TypedPtr dqkv) override;
  void SoftmaxRows(int64_t rows, int cols, float scale, bool causal, site::ConstTypedPtr x,
                   site::TypedPtr y) override;
  void SoftmaxRowsBackward(int64_t rows, int cols, float scale, site::ConstTypedPtr y,
                           site::ConstTypedPtr dy, site::TypedPtr dx) override;
  void ClassifierLoss(int64_t rows, int classes, site::TypedPtr logits, const int32_t* labels,
                      float grad_scale, float* loss, int32_t* correct) override;
  void Dropout(int64_t n, float p, uint64_t key, int64_t offset, site::ConstTypedPtr x,
               site::TypedPtr y) override;
  void Axpy(int64_t n, float alpha, site::ConstTypedPtr x, site::TypedPtr y) override;
  void Axpby(int64_t n, float alpha, site::ConstTypedPtr x, float beta, site::TypedPtr y) override;
  void Copy2D(int64_t rows, int cols, site::ConstTypedPtr src, int64_t ld_src, site::TypedPtr dst,
              int64_t ld_dst) override;
  void ExtractPatches(int n, int channels, int height, int width, int p, site::ConstTypedPtr images,
                      site::TypedPtr patches) override;
  void HeadsToBatch(int n, int tokens, int heads, int dh, site::ConstTypedPtr x, int64_t ldx,
                    site::TypedPtr y) override;
  void BatchToHeads(int n, int tokens, int heads, int dh, site::ConstTypedPtr y, site::TypedPtr x,
                    int64_t ldx) override;
  void EmbeddingLookup(int64_t rows, int dim, int vocab, const float* ids, const float* table,
                       site::TypedPtr y) override;
  void EmbeddingBackward(int64_t rows, int dim, int vocab, const float* ids, site::ConstTypedPtr dy,
                         float* dtable) override;
  void SgdUpdate(int64_t n, float lr, float momentum, float wd, float scale, float* param,
                 const float* grad, float* velocity, site::TypedPtr copy) override;
  void AdamWUpdate(int64_t n, float lr, float b1, float b2, float eps, float wd, float bias1,
                   float bias2, float scale, float* param, const float* grad, float* m, float* v,
                   site::TypedPtr copy) override;
  double SumSquares(int64_t n, const float* x) override;
  absl::Status EncodeValues(const compression::StageSpec& stage, uint64_t seed,
                            site::ConstTypedPtr values, int64_t n,
                            std::vector<uint8_t>* payload) override {
    return inner_->EncodeValues(stage, seed, values, n, payload);
  }
  absl::Status DecodeValues(const compression::StageSpec& stage, absl::Span<const uint8_t> payload,
                            int64_t n, site::TypedPtr values) override {
    return inner_->DecodeValues(stage, payload, n, values);
  }

 private:
  // Runs `op`, timed into `family` while profiling.
  template <typename Op>
  void Timed(const char* family, Op&& op);
  void Record(const GemmCall& call) {
    if (recording_) calls_.push_back(call);
  }

  site::Backend* inner_;
  bool recording_ = false, profiling_ = false;
  std::vector<GemmCall> calls_;
  std::map<std::string, double> seconds_;
  absl::Status profile_error_;  // A device error seen by a profiling Sync, for the next Sync.
};

// The recorded calls, each on its own operands (of the recorded types) in one arena of `backend`
// (which must outlive the replay).
class GemmReplay {
 public:
  static absl::StatusOr<GemmReplay> Create(std::vector<GemmCall> calls, site::Backend* backend);
  // Runs every call once, in order, and waits for the device.
  absl::Status Run();
  // CPU only: runs every call as one plain cblas_sgemm per matrix, OpenBLAS threading itself with
  // `threads` threads (restored to 1, the CPU backend's setting, afterwards). f32 calls only.
  void RunPlainOpenBlas(int threads);

 private:
  std::vector<GemmCall> calls_;
  std::vector<std::array<int64_t, 3>> offsets_;  // per call: A, B, C offsets in arena_ (bytes)
  site::Backend* backend_ = nullptr;
  site::DeviceBuffer arena_;
};

}  // namespace strait::bench
