// The CUDA backend: cuBLAS for matrix products, the kernels of cuda_kernels.cu for the rest, all
// on one stream. Compiled by the host compiler; only the kernels go through nvcc.
#include "site/backend/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compression/cuda/cuda_check.h"
#include "site/backend/cuda/attention_kernels.h"
#include "site/backend/cuda/cuda_kernels.h"
#include "site/backend/op_math.h"

namespace strait::site {
namespace {

cublasOperation_t Op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, std::string name, bool bf16, bool fused_attention, cudaStream_t stream,
              cublasHandle_t cublas, double* partials)
      : device_(device),
        name_(std::move(name)),
        bf16_(bf16),
        fused_attention_(fused_attention),
        stream_(stream),
        cublas_(cublas),
        partials_(partials) {}

  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    cudaFree(bf16_a_.data);
    cudaFree(bf16_b_.data);
    cudaFree(partials_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }

  std::string Name() const override { return name_; }
  cudaStream_t stream() const { return stream_; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    absl::Status s = STRAIT_CUDA_CHECK(cudaMalloc(&p, bytes));
    if (!s.ok()) return s;
    s = STRAIT_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    if (!s.ok()) {
      cudaFree(p);
      return s;
    }
    return p;
  }

  void Free(void* ptr) override {
    if (ptr == nullptr) return;
    Check(STRAIT_CUDA_CHECK(cudaStreamSynchronize(stream_)));
    Check(STRAIT_CUDA_CHECK(cudaFree(ptr)));
  }

  void CopyToDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0)
      Check(STRAIT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_)));
  }
  void CopyToHost(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    Check(STRAIT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_)));
    Check(STRAIT_CUDA_CHECK(cudaStreamSynchronize(stream_)));
  }
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes > 0)
      Check(STRAIT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_)));
  }
  void Fill(float* x, int64_t n, float value) override {
    if (n > 0) Check(STRAIT_CUDA_CHECK(LaunchFill(stream_, x, n, value)));
  }

  absl::Status Sync() override {
    Check(STRAIT_CUDA_CHECK(cudaStreamSynchronize(stream_)));
    absl::Status s = error_;
    error_ = absl::OkStatus();
    return s;
  }

  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    if (m == 0 || n == 0) return;
    if (!bf16_) {
      Check(STRAIT_CUBLAS_CHECK(
          cublasSgemm(cublas_, Op(tb), Op(ta), n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc)));
      return;
    }
    a = RoundedToBf16(a, MatrixSpan(ta ? k : m, ta ? m : k, lda), bf16_a_);
    b = RoundedToBf16(b, MatrixSpan(tb ? n : k, tb ? k : n, ldb), bf16_b_);
    if (a == nullptr || b == nullptr) return;
    Check(STRAIT_CUBLAS_CHECK(cublasGemmEx(cublas_, Op(tb), Op(ta), n, m, k, &alpha, b, CUDA_R_32F,
                                           ldb, a, CUDA_R_32F, lda, &beta, c, CUDA_R_32F, ldc,
                                           kBf16Compute, CUBLAS_GEMM_DEFAULT)));
  }

  void GemmBatched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                   int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta,
                   float* c, int ldc, int64_t stride_c, int batch) override {
    if (m == 0 || n == 0 || batch == 0) return;
    if (!bf16_) {
      Check(STRAIT_CUBLAS_CHECK(cublasSgemmStridedBatched(cublas_, Op(tb), Op(ta), n, m, k, &alpha,
                                                          b, ldb, stride_b, a, lda, stride_a, &beta,
                                                          c, ldc, stride_c, batch)));
      return;
    }
    a = RoundedToBf16(a, MatrixSpan(ta ? k : m, ta ? m : k, lda, stride_a, batch), bf16_a_);
    b = RoundedToBf16(b, MatrixSpan(tb ? n : k, tb ? k : n, ldb, stride_b, batch), bf16_b_);
    if (a == nullptr || b == nullptr) return;
    Check(STRAIT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        cublas_, Op(tb), Op(ta), n, m, k, &alpha, b, CUDA_R_32F, ldb, stride_b, a, CUDA_R_32F, lda,
        stride_a, &beta, c, CUDA_R_32F, ldc, stride_c, batch, kBf16Compute, CUBLAS_GEMM_DEFAULT)));
  }

  bool FusedAttention(int dh) const override { return fused_attention_ && FusedAttentionTakes(dh); }
  void FusedAttentionForward(int batch, int tokens, int dh, float scale, bool causal,
                             const float* q, const float* k, const float* v, float* o,
                             float* lse) override {
    Check(STRAIT_CUDA_CHECK(LaunchFusedAttentionForward(stream_, batch, tokens, dh, scale, causal,
                                                        bf16_, q, k, v, o, lse)));
  }
  void FusedAttentionBackward(int batch, int tokens, int dh, float scale, bool causal,
                              const float* q, const float* k, const float* v, const float* o,
                              const float* lse, const float* d_o, float* delta, float* dq,
                              float* dk, float* dv) override {
    Check(STRAIT_CUDA_CHECK(LaunchFusedAttentionBackward(stream_, batch, tokens, dh, scale, causal,
                                                         bf16_, q, k, v, o, lse, d_o, delta, dq, dk,
                                                         dv)));
  }

  void BiasActivation(int64_t rows, int cols, const float* bias, ActivationOp act, float* x,
                      float* y) override {
    Check(STRAIT_CUDA_CHECK(LaunchBiasActivation(stream_, rows, cols, bias, act, x, y)));
  }
  void ActivationBackward(int64_t n, ActivationOp act, const float* x, const float* dy,
                          float* dx) override {
    Check(STRAIT_CUDA_CHECK(LaunchActivationBackward(stream_, n, act, x, dy, dx)));
  }
  void ColumnSum(int64_t rows, int cols, const float* x, int64_t ldx, float beta,
                 float* out) override {
    Check(STRAIT_CUDA_CHECK(LaunchColumnSum(stream_, rows, cols, x, ldx, beta, out)));
  }
  void LayerNormForward(int64_t rows, int dim, const float* x, const float* gamma,
                        const float* beta, float* y, float* mean, float* rstd) override {
    Check(STRAIT_CUDA_CHECK(
        LaunchLayerNormForward(stream_, rows, dim, x, gamma, beta, y, mean, rstd)));
  }
  void LayerNormBackward(int64_t rows, int dim, const float* x, const float* gamma,
                         const float* mean, const float* rstd, const float* dy, float* dx,
                         float* dgamma, float* dbeta) override {
    Check(STRAIT_CUDA_CHECK(
        LaunchLayerNormBackward(stream_, rows, dim, x, gamma, mean, rstd, dy, dx, dgamma, dbeta)));
  }
  void SoftmaxRows(int64_t rows, int cols, float scale, bool causal, const float* x,
                   float* y) override {
    Check(STRAIT_CUDA_CHECK(LaunchSoftmaxRows(stream_, rows, cols, scale, causal, x, y)));
  }
  void EmbeddingLookup(int64_t rows, int dim, int vocab, const float* ids, const float* table,
                       float* y) override {
    Check(STRAIT_CUDA_CHECK(LaunchEmbeddingLookup(stream_, rows, dim, vocab, ids, table, y)));
  }
  void EmbeddingBackward(int64_t rows, int dim, int vocab, const float* ids, const float* dy,
                         float* dtable) override {
    Check(STRAIT_CUDA_CHECK(LaunchEmbeddingBackward(stream_, rows, dim, vocab, ids, dy, dtable)));
  }
  void SoftmaxRowsBackward(int64_t rows, int cols, float scale, const float* y, const float* dy,
                           float* dx) override {
    Check(STRAIT_CUDA_CHECK(LaunchSoftmaxRowsBackward(stream_, rows, cols, scale, y, dy, dx)));
  }
  void CrossEntropy(int64_t rows, int classes, const float* logits, const int32_t* labels,
                    float grad_scale, float* loss, int32_t* correct, float* dlogits) override {
    Check(STRAIT_CUDA_CHECK(LaunchCrossEntropy(stream_, rows, classes, logits, labels, grad_scale,
                                               loss, correct, dlogits)));
  }
  void Dropout(int64_t n, float p, uint64_t key, int64_t offset, const float* x,
               float* y) override {
    Check(STRAIT_CUDA_CHECK(LaunchDropout(stream_, n, p, key, offset, x, y)));
  }
  void Axpy(int64_t n, float alpha, const float* x, float* y) override {
    Check(STRAIT_CUDA_CHECK(LaunchAxpy(stream_, n, alpha, x, y)));
  }
  void Axpby(int64_t n, float alpha, const float* x, float beta, float* y) override {
    Check(STRAIT_CUDA_CHECK(LaunchAxpby(stream_, n, alpha, x, beta, y)));
  }
  void Copy2D(int64_t rows, int cols, const float* src, int64_t ld_src, float* dst,
              int64_t ld_dst) override {
    Check(STRAIT_CUDA_CHECK(LaunchCopy2D(stream_, rows, cols, src, ld_src, dst, ld_dst)));
  }
  void ExtractPatches(int n, int channels, int height, int width, int p, const float* images,
                      float* patches) override {
    Check(STRAIT_CUDA_CHECK(
        LaunchExtractPatches(stream_, n, channels, height, width, p, images, patches)));
  }
  void HeadsToBatch(int n, int tokens, int heads, int dh, const float* x, int64_t ldx,
                    float* y) override {
    Check(STRAIT_CUDA_CHECK(LaunchHeadsToBatch(stream_, n, tokens, heads, dh, x, ldx, y)));
  }
  void BatchToHeads(int n, int tokens, int heads, int dh, const float* y, float* x,
                    int64_t ldx) override {
    Check(STRAIT_CUDA_CHECK(LaunchBatchToHeads(stream_, n, tokens, heads, dh, y, x, ldx)));
  }
  void SgdUpdate(int64_t n, float lr, float momentum, float wd, float scale, float* param,
                 const float* grad, float* velocity) override {
    Check(STRAIT_CUDA_CHECK(
        LaunchSgdUpdate(stream_, n, lr, momentum, wd, scale, param, grad, velocity)));
  }
  void AdamWUpdate(int64_t n, float lr, float b1, float b2, float eps, float wd, float bias1,
                   float bias2, float scale, float* param, const float* grad, float* m,
                   float* v) override {
    Check(STRAIT_CUDA_CHECK(LaunchAdamWUpdate(stream_, n, lr, b1, b2, eps, wd, bias1, bias2, scale,
                                              param, grad, m, v)));
  }

  double SumSquares(int64_t n, const float* x) override {
    Check(STRAIT_CUDA_CHECK(LaunchSumSquares(stream_, n, x, partials_)));
    double result = 0.0;
    CopyToHost(&result, partials_, sizeof(double));
    return error_.ok() ? result : std::numeric_limits<double>::quiet_NaN();
  }

 private:
  // A device buffer that grows to the largest operand rounded so far.
  struct Scratch {
    float* data = nullptr;
    int64_t floats = 0;
  };

  void Check(absl::Status s) {
    if (!s.ok() && error_.ok()) error_ = std::move(s);
  }

  // The `n` floats from x rounded to bf16 into `scratch` (nullptr after an error, kept for Sync).
  // Inputs that are already bf16 values make cuBLAS's down-conversion for the tensor cores exact,
  // so the products are the CPU emulation's up to the order of the sums.
  const float* RoundedToBf16(const float* x, int64_t n, Scratch& scratch) {
    if (n > scratch.floats) {
      Check(STRAIT_CUDA_CHECK(cudaStreamSynchronize(stream_)));
      cudaFree(scratch.data);
      scratch = {};
      absl::Status s =
          STRAIT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scratch.data), sizeof(float) * n));
      if (!s.ok()) {
        Check(std::move(s));
        return nullptr;
      }
      scratch.floats = n;
    }
    Check(STRAIT_CUDA_CHECK(LaunchRoundToBf16(stream_, x, n, scratch.data)));
    return scratch.data;
  }

  // bf16 tensor-core products with fp32 accumulation, on fp32 buffers (cuBLAS converts them).
  static constexpr cublasComputeType_t kBf16Compute = CUBLAS_COMPUTE_32F_FAST_16BF;

  int device_;
  std::string name_;
  bool bf16_;  // training.precision: bf16.
  bool fused_attention_;
  Scratch bf16_a_, bf16_b_;
  cudaStream_t stream_;
  cublasHandle_t cublas_;
  double* partials_;  // [kSumSquaresBlocks] on the device
  absl::Status error_;
};

}  // namespace

void* CudaStreamOf(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  return cuda != nullptr ? cuda->stream() : nullptr;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device, Precision precision,
                                                           AttentionKernel attention) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "device 'cuda' requested, but no CUDA device is available (",
        e != cudaSuccess ? cudaGetErrorString(e) : "no devices", "); use device 'cpu'"));
  }
  if (device < 0 || device >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUDA device ", device, " requested; this machine has ", count));
  }
  absl::Status s = STRAIT_CUDA_CHECK(cudaSetDevice(device));
  if (!s.ok()) return s;
  cudaDeviceProp prop;
  s = STRAIT_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  if (!s.ok()) return s;
  cudaStream_t stream = nullptr;
  s = STRAIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (!s.ok()) return s;
  cublasHandle_t cublas = nullptr;
  s = STRAIT_CUBLAS_CHECK(cublasCreate(&cublas));
  if (s.ok()) s = STRAIT_CUBLAS_CHECK(cublasSetStream(cublas, stream));
  // FP32 products stay FP32 (cuBLAS's default math mode uses no TF32 for sgemm).
  if (s.ok()) s = STRAIT_CUBLAS_CHECK(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH));
  double* partials = nullptr;
  if (s.ok()) s = STRAIT_CUDA_CHECK(cudaMalloc(&partials, sizeof(double) * kSumSquaresBlocks));
  if (!s.ok()) {
    if (cublas != nullptr) cublasDestroy(cublas);
    cudaStreamDestroy(stream);
    return s;
  }
  const bool bf16 = precision == Precision::kBf16;
  return std::unique_ptr<Backend>(
      new CudaBackend(device, absl::StrCat("cuda:", device, " ", prop.name, bf16 ? " (bf16)" : ""),
                      bf16, attention == AttentionKernel::kFused, stream, cublas, partials));
}

}  // namespace strait::site
