// The CUDA backend: cuBLASLt for matrix products (bf16 tensor cores or exact f32, epilogues fused
// where cuBLASLt has them), cuDNN's flash attention for bf16, the kernels of cuda_kernels.h and
// attention_kernels.h for the rest, all on one stream. Compiled by the host compiler; only the
// kernels go through nvcc.
#include "site/backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compression/chain_spec.h"
#include "compression/cuda/codec_kernels.h"
#include "compression/quantize_stage.h"
#include "core/library_check.h"
#include "core/status.h"
#include "site/backend/cuda/attention_kernels.h"
#include "site/backend/cuda/cuda_kernels.h"
#include "site/backend/cuda/cudnn_attention.h"
#include "site/backend/cuda/lt_matmul.h"
#include "site/backend/op_math.h"

namespace strait::site {
namespace {

// A device buffer that grows to the largest size asked for so far (after the stream is idle).
class Scratch {
 public:
  ~Scratch() { cudaFree(data_); }
  // `bytes` of device memory, or nullptr after a failure (kept in *error).
  void* Get(size_t bytes, cudaStream_t stream, absl::Status* error) {
    if (bytes <= bytes_) return data_;
    error->Update(STRAIT_CUDA_CHECK(cudaStreamSynchronize(stream)));
    cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
    const absl::Status s = STRAIT_CUDA_CHECK(cudaMalloc(&data_, bytes));
    if (!s.ok()) {
      error->Update(s);
      data_ = nullptr;
      return nullptr;
    }
    bytes_ = bytes;
    return data_;
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::string name, bool bf16, bool fused_attention, cudaStream_t stream,
              std::unique_ptr<LtMatmul> lt, std::unique_ptr<CudnnAttention> cudnn, double* partials)
      : name_(std::move(name)),
        bf16_(bf16),
        fused_attention_(fused_attention),
        stream_(stream),
        lt_(std::move(lt)),
        cudnn_(std::move(cudnn)),
        sum_partials_(partials) {}

  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);
    lt_.reset();
    cudnn_.reset();
    cudaFree(sum_partials_);
    cudaStreamDestroy(stream_);
  }

  using Backend::Gemm;
  std::string Name() const override { return name_; }
  DType activation_dtype() const override { return bf16_ ? DType::kBf16 : DType::kF32; }
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
  void Fill(TypedPtr x, int64_t n, float value) override {
    Check(STRAIT_CUDA_CHECK(LaunchFill(stream_, x, n, value)));
  }
  void Convert(int64_t n, ConstTypedPtr x, TypedPtr y) override {
    Check(STRAIT_CUDA_CHECK(LaunchConvert(stream_, n, x, y)));
  }

  absl::Status Sync() override {
    Check(STRAIT_CUDA_CHECK(cudaStreamSynchronize(stream_)));
    return std::exchange(error_, absl::OkStatus());
  }

  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, ConstTypedPtr a, int lda,
            ConstTypedPtr b, int ldb, float beta, TypedPtr c, int ldc,
            const GemmEpilogue& e) override {
    if (m == 0 || n == 0) return;
    LtProduct p = Product(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (p.a == nullptr || p.b == nullptr) return;  // an operand's conversion failed (error_)
    LtEpilogue le;
    if (FusedEpilogue(e, beta, n, ldc, c.dtype(), &le) && lt_->Supports(p, le)) {
      Check(lt_->Run(p, le));
      if (le.bias_grad != nullptr) {
        Axpy(n, 1.0f, le.bias_grad, e.bias_grad);
      } else if (e.bias_grad != nullptr) {
        ColumnSum(m, n, c, ldc, 1.0f, e.bias_grad);  // the column sums of C as stored
      }
      return;
    }
    if (e.empty()) {
      Check(lt_->Run(p));
      return;
    }
    // The product in f32 scratch, then the epilogue kernel stores C and the rest.
    auto* t =
        static_cast<float*>(f32_product_.Get(sizeof(float) * int64_t{m} * n, stream_, &error_));
    auto* partials = PartialsFor(m, n);
    if (t == nullptr || partials == nullptr) return;
    if (beta != 0.0f) Copy2D(m, n, c, ldc, t, n);
    p.c = t, p.ldc = n, p.c_type = DType::kF32;
    Check(lt_->Run(p));
    Check(STRAIT_CUDA_CHECK(LaunchGemmEpilogue(stream_, m, n, t, ldc, e, c, partials)));
  }

  void GemmBatched(bool ta, bool tb, int m, int n, int k, float alpha, ConstTypedPtr a, int lda,
                   int64_t stride_a, ConstTypedPtr b, int ldb, int64_t stride_b, float beta,
                   TypedPtr c, int ldc, int64_t stride_c, int batch) override {
    if (m == 0 || n == 0 || batch == 0) return;
    LtProduct p =
        Product(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, stride_a, stride_b, batch);
    if (p.a == nullptr || p.b == nullptr) return;
    p.batch = batch;
    p.stride_a = stride_a, p.stride_b = stride_b, p.stride_c = stride_c;
    Check(lt_->Run(p));
  }

  // bf16 through cuDNN's flash attention, f32 through the CUDA-core kernels.
  bool FusedAttention(int dh) const override {
    if (!fused_attention_ || !FusedAttentionTakes(dh)) return false;
    return bf16_ ? cudnn_ != nullptr : dh <= kFusedAttentionMaxHeadDimF32;
  }
  void FusedAttentionForward(const AttentionDims& d, ConstTypedPtr qkv, TypedPtr out,
                             float* lse) override {
    if (qkv.is_f32() && out.is_f32()) {
      Check(STRAIT_CUDA_CHECK(LaunchFusedAttentionForward(stream_, d, qkv.f32(), out.f32(), lse)));
      return;
    }
    if (!Cudnn(d, qkv, out)) return;
    Check(cudnn_->Forward(Shape(d), qkv.data(), out.data(), lse));
  }
  void FusedAttentionBackward(const AttentionDims& d, ConstTypedPtr qkv, ConstTypedPtr out,
                              const float* lse, ConstTypedPtr dout, TypedPtr dqkv,
                              float* delta) override {
    if (qkv.is_f32() && out.is_f32() && dout.is_f32() && dqkv.is_f32()) {
      Check(STRAIT_CUDA_CHECK(LaunchFusedAttentionBackward(stream_, d, qkv.f32(), out.f32(), lse,
                                                           dout.f32(), delta, dqkv.f32())));
      return;
    }
    if (!Cudnn(d, qkv, dqkv) || !Cudnn(d, out, dout)) return;
    Check(cudnn_->Backward(Shape(d), qkv.data(), out.data(), lse, dout.data(), dqkv.data()));
  }

  void BiasActivation(int64_t rows, int cols, const float* bias, ActivationOp act, TypedPtr x,
                      TypedPtr y) override {
    Check(STRAIT_CUDA_CHECK(LaunchBiasActivation(stream_, rows, cols, bias, act, x, y)));
  }
  void ActivationBackward(int64_t n, ActivationOp act, ConstTypedPtr x, ConstTypedPtr dy,
                          TypedPtr dx) override {
    Check(STRAIT_CUDA_CHECK(LaunchActivationBackward(stream_, n, act, x, dy, dx)));
  }
  void ColumnSum(int64_t rows, int cols, ConstTypedPtr x, int64_t ldx, float beta,
                 float* out) override {
    float* partials = PartialsFor(rows, cols);
    if (partials == nullptr) return;
    Check(STRAIT_CUDA_CHECK(LaunchColumnSum(stream_, rows, cols, x, ldx, beta, out, partials)));
  }
  void LayerNormForward(int64_t rows, int dim, ConstTypedPtr x, const float* gamma,
                        const float* beta, TypedPtr y, float* mean, float* rstd) override {
    Check(STRAIT_CUDA_CHECK(
        LaunchLayerNormForward(stream_, rows, dim, x, gamma, beta, y, mean, rstd)));
  }
  void ResidualLayerNormForward(int64_t rows, int dim, ConstTypedPtr x, ConstTypedPtr branch,
                                TypedPtr r, const float* gamma, const float* beta, TypedPtr y,
                                float* mean, float* rstd) override {
    Check(STRAIT_CUDA_CHECK(LaunchResidualLayerNormForward(stream_, rows, dim, x, branch, r, gamma,
                                                           beta, y, mean, rstd)));
  }
  void LayerNormBackward(int64_t rows, int dim, ConstTypedPtr x, const float* gamma,
                         const float* mean, const float* rstd, ConstTypedPtr dy, TypedPtr dx,
                         float* dgamma, float* dbeta) override {
    float* partials = PartialsFor(rows, 2 * int64_t{dim});
    if (partials == nullptr) return;
    Check(STRAIT_CUDA_CHECK(LaunchLayerNormBackward(stream_, rows, dim, x, gamma, mean, rstd, dy,
                                                    dx, dgamma, dbeta, partials)));
  }
  void RmsNormForward(int64_t rows, int dim, float eps, ConstTypedPtr x, const float* gamma,
                      TypedPtr y, float* rstd) override {
    Check(STRAIT_CUDA_CHECK(LaunchRmsNormForward(stream_, rows, dim, eps, x, gamma, y, rstd)));
  }
  void RmsNormBackward(int64_t rows, int dim, ConstTypedPtr x, const float* gamma,
                       const float* rstd, ConstTypedPtr dy, TypedPtr dx, float* dgamma) override {
    float* partials = PartialsFor(rows, dim);
    if (partials == nullptr) return;
    Check(STRAIT_CUDA_CHECK(
        LaunchRmsNormBackward(stream_, rows, dim, x, gamma, rstd, dy, dx, dgamma, partials)));
  }
  void Rotary(int64_t rows, int tokens, int heads, int dh, double theta, bool inverse, TypedPtr x,
              int64_t ldx) override {
    Check(
        STRAIT_CUDA_CHECK(LaunchRotary(stream_, rows, tokens, heads, dh, theta, inverse, x, ldx)));
  }
  void SwiGluForward(int64_t rows, int f, ConstTypedPtr gate_up, TypedPtr y) override {
    Check(STRAIT_CUDA_CHECK(LaunchSwiGluForward(stream_, rows, f, gate_up, y)));
  }
  void SwiGluBackward(int64_t rows, int f, ConstTypedPtr gate_up, ConstTypedPtr dy,
                      TypedPtr dgate_up) override {
    Check(STRAIT_CUDA_CHECK(LaunchSwiGluBackward(stream_, rows, f, gate_up, dy, dgate_up)));
  }
  void RepeatKvHeads(int64_t rows, int heads, int kv_heads, int dh, ConstTypedPtr qkv,
                     TypedPtr full) override {
    Check(STRAIT_CUDA_CHECK(LaunchRepeatKvHeads(stream_, rows, heads, kv_heads, dh, qkv, full)));
  }
  void SumKvHeads(int64_t rows, int heads, int kv_heads, int dh, ConstTypedPtr dfull,
                  TypedPtr dqkv) override {
    Check(STRAIT_CUDA_CHECK(LaunchSumKvHeads(stream_, rows, heads, kv_heads, dh, dfull, dqkv)));
  }
  void SoftmaxRows(int64_t rows, int cols, float scale, bool causal, ConstTypedPtr x,
                   TypedPtr y) override {
    Check(STRAIT_CUDA_CHECK(LaunchSoftmaxRows(stream_, rows, cols, scale, causal, x, y)));
  }
  void SoftmaxRowsBackward(int64_t rows, int cols, float scale, ConstTypedPtr y, ConstTypedPtr dy,
                           TypedPtr dx) override {
    Check(STRAIT_CUDA_CHECK(LaunchSoftmaxRowsBackward(stream_, rows, cols, scale, y, dy, dx)));
  }
  void ClassifierLoss(int64_t rows, int classes, TypedPtr logits, const int32_t* labels,
                      float grad_scale, float* loss, int32_t* correct) override {
    Check(STRAIT_CUDA_CHECK(
        LaunchClassifierLoss(stream_, rows, classes, logits, labels, grad_scale, loss, correct)));
  }
  void Dropout(int64_t n, float p, uint64_t key, int64_t offset, ConstTypedPtr x,
               TypedPtr y) override {
    Check(STRAIT_CUDA_CHECK(LaunchDropout(stream_, n, p, key, offset, x, y)));
  }
  void Axpy(int64_t n, float alpha, ConstTypedPtr x, TypedPtr y) override {
    Check(STRAIT_CUDA_CHECK(LaunchAxpy(stream_, n, alpha, x, y)));
  }
  void Axpby(int64_t n, float alpha, ConstTypedPtr x, float beta, TypedPtr y) override {
    Check(STRAIT_CUDA_CHECK(LaunchAxpby(stream_, n, alpha, x, beta, y)));
  }
  void Copy2D(int64_t rows, int cols, ConstTypedPtr src, int64_t ld_src, TypedPtr dst,
              int64_t ld_dst) override {
    Check(STRAIT_CUDA_CHECK(LaunchCopy2D(stream_, rows, cols, src, ld_src, dst, ld_dst)));
  }
  void ExtractPatches(int n, int channels, int height, int width, int p, ConstTypedPtr images,
                      TypedPtr patches) override {
    Check(STRAIT_CUDA_CHECK(
        LaunchExtractPatches(stream_, n, channels, height, width, p, images, patches)));
  }
  void HeadsToBatch(int n, int tokens, int heads, int dh, ConstTypedPtr x, int64_t ldx,
                    TypedPtr y) override {
    Check(STRAIT_CUDA_CHECK(LaunchHeadsToBatch(stream_, n, tokens, heads, dh, x, ldx, y)));
  }
  void BatchToHeads(int n, int tokens, int heads, int dh, ConstTypedPtr y, TypedPtr x,
                    int64_t ldx) override {
    Check(STRAIT_CUDA_CHECK(LaunchBatchToHeads(stream_, n, tokens, heads, dh, y, x, ldx)));
  }
  void EmbeddingLookup(int64_t rows, int dim, int vocab, const float* ids, const float* table,
                       TypedPtr y) override {
    Check(STRAIT_CUDA_CHECK(LaunchEmbeddingLookup(stream_, rows, dim, vocab, ids, table, y)));
  }
  void EmbeddingBackward(int64_t rows, int dim, int vocab, const float* ids, ConstTypedPtr dy,
                         float* dtable) override {
    Check(STRAIT_CUDA_CHECK(LaunchEmbeddingBackward(stream_, rows, dim, vocab, ids, dy, dtable)));
  }
  void SgdUpdate(int64_t n, float lr, float momentum, float wd, float scale, float* param,
                 const float* grad, float* velocity, TypedPtr copy) override {
    Check(STRAIT_CUDA_CHECK(
        LaunchSgdUpdate(stream_, n, lr, momentum, wd, scale, param, grad, velocity, copy)));
  }
  void AdamWUpdate(int64_t n, float lr, float b1, float b2, float eps, float wd, float bias1,
                   float bias2, float scale, float* param, const float* grad, float* m, float* v,
                   TypedPtr copy) override {
    Check(STRAIT_CUDA_CHECK(LaunchAdamWUpdate(stream_, n, lr, b1, b2, eps, wd, bias1, bias2, scale,
                                              param, grad, m, v, copy)));
  }

  absl::Status EncodeValues(const compression::StageSpec& stage, uint64_t seed,
                            ConstTypedPtr values, int64_t n,
                            std::vector<uint8_t>* payload) override;
  absl::Status DecodeValues(const compression::StageSpec& stage, absl::Span<const uint8_t> payload,
                            int64_t n, TypedPtr values) override;

  double SumSquares(int64_t n, const float* x) override {
    Check(STRAIT_CUDA_CHECK(LaunchSumSquares(stream_, n, x, sum_partials_)));
    double result = 0.0;
    CopyToHost(&result, sum_partials_, sizeof(double));
    return error_.ok() ? result : std::numeric_limits<double>::quiet_NaN();
  }

 private:
  // The fused f32 kernels keep a row of a head in registers.
  static constexpr int kFusedAttentionMaxHeadDimF32 = 64;

  void Check(absl::Status s) { error_.Update(s); }

  // A product's operands in the type the products take: bf16 under bf16 precision (an f32
  // tensor is rounded into scratch first, as the CPU emulation rounds it), f32 otherwise (a bf16
  // tensor is widened). Null operands after an error.
  LtProduct Product(bool ta, bool tb, int m, int n, int k, float alpha, ConstTypedPtr a, int lda,
                    ConstTypedPtr b, int ldb, float beta, TypedPtr c, int ldc, int64_t stride_a = 0,
                    int64_t stride_b = 0, int batch = 1) {
    const DType want = bf16_ ? DType::kBf16 : DType::kF32;
    LtProduct p;
    p.trans_a = ta, p.trans_b = tb, p.m = m, p.n = n, p.k = k;
    p.a = Operand(a, MatrixSpan(ta ? k : m, ta ? m : k, lda, stride_a, batch), want, operand_a_);
    p.b = Operand(b, MatrixSpan(tb ? n : k, tb ? k : n, ldb, stride_b, batch), want, operand_b_);
    p.lda = lda, p.ldb = ldb;
    p.c = c.data(), p.ldc = ldc, p.c_type = c.dtype(), p.ab = want;
    p.alpha = alpha, p.beta = beta;
    return p;
  }

  const void* Operand(ConstTypedPtr x, int64_t n, DType want, Scratch& scratch) {
    if (x.dtype() == want) return x.data();
    void* converted = scratch.Get(static_cast<size_t>(n) * SizeOf(want), stream_, &error_);
    if (converted == nullptr) return nullptr;
    Convert(n, x, TypedPtr(converted, want));
    return converted;
  }

  // The cuBLASLt epilogue for `e`, when it has one: GELU forward with bias and the pre-activation,
  // bias alone, or GELU's backward. With an f32 C the bias gradient comes from cuBLASLt too (into
  // scratch: cuBLASLt overwrites it, the op accumulates it from le->bias_grad); beside a bf16 C it
  // has none, and Gemm sums the stored C's columns. Beside a bf16 C the bias is passed as bf16 (a
  // rounded copy in scratch: cuBLASLt takes no f32 bias there). The aux matrix (pre or act_input)
  // has C's leading dimension `ldc`; C has n columns.
  bool FusedEpilogue(const GemmEpilogue& e, float beta, int n, int ldc, DType c_type,
                     LtEpilogue* le) {
    if (e.empty()) return false;
    if (e.grad_of == ActivationOp::kGelu && e.bias == nullptr && e.act == ActivationOp::kNone &&
        !e.pre && beta == 0.0f) {
      le->dgelu = true;
      le->aux = const_cast<void*>(e.act_input.data());
      le->aux_type = e.act_input.dtype();
      le->ld_aux = ldc;
      if (e.bias_grad == nullptr || c_type != DType::kF32) return true;
      le->bias_grad = static_cast<float*>(bias_grad_.Get(sizeof(float) * n, stream_, &error_));
      return le->bias_grad != nullptr;
    }
    if (e.grad_of != ActivationOp::kNone || e.bias_grad != nullptr) return false;
    const bool with_bias = e.bias != nullptr;
    const bool gelu = e.act == ActivationOp::kGelu && e.pre && beta == 0.0f;
    if (!gelu && (e.act != ActivationOp::kNone || e.pre)) return false;
    le->gelu = gelu;
    if (gelu) le->aux = e.pre.data(), le->aux_type = e.pre.dtype(), le->ld_aux = ldc;
    if (!with_bias) return true;
    le->bias = e.bias;
    if (c_type == DType::kBf16) {
      void* rounded = bias_bf16_.Get(SizeOf(DType::kBf16) * n, stream_, &error_);
      if (rounded == nullptr) return false;
      Convert(n, ConstTypedPtr(e.bias), TypedPtr(rounded, DType::kBf16));
      le->bias = rounded, le->bias_type = DType::kBf16;
    }
    return true;
  }

  // Scratch for the per-chunk partial sums of a reduction over `rows` rows of `cols` columns.
  float* PartialsFor(int64_t rows, int64_t cols) {
    return static_cast<float*>(partials_.Get(
        sizeof(float) * std::max<int64_t>(PartialFloats(rows, cols), 1), stream_, &error_));
  }

  bool Cudnn(const AttentionDims& d, ConstTypedPtr qkv, ConstTypedPtr out) {
    if (cudnn_ != nullptr && qkv.dtype() == DType::kBf16 && out.dtype() == DType::kBf16) {
      return true;
    }
    Check(absl::FailedPreconditionError(absl::StrCat(
        "fused attention of ", ToString(qkv.dtype()), " tensors (n=", d.n, " tokens=", d.tokens,
        " heads=", d.heads, " dh=", d.dh, ") needs cuDNN and bf16, or f32: ",
        cudnn_ == nullptr ? "cuDNN did not load" : "mixed types")));
    return false;
  }
  static CudnnAttentionShape Shape(const AttentionDims& d) {
    return {d.n, d.tokens, d.heads, d.dh, d.scale, d.causal};
  }

  std::string name_;
  bool bf16_;  // training.precision: bf16 (activations and operands stored as bf16)
  bool fused_attention_;
  cudaStream_t stream_;
  std::unique_ptr<LtMatmul> lt_;
  std::unique_ptr<CudnnAttention> cudnn_;  // null when cuDNN cannot run here
  double* sum_partials_;                   // [kSumSquaresBlocks] on the device
  Scratch operand_a_, operand_b_, f32_product_, partials_, bias_grad_, bias_bf16_;
  Scratch codec_floats_, codec_bytes_;  // A tensor widened for the value kernels, their payload.
  absl::Status error_;
};

// The payload's bytes for n values of `stage` (the CPU stage's layout:
// compression/quantize_stage.h).
absl::StatusOr<uint64_t> PayloadBytes(const compression::StageSpec& stage, int64_t n) {
  using compression::StageKind;
  switch (stage.kind) {
    case StageKind::kNone:
      return 4 * static_cast<uint64_t>(n);
    case StageKind::kFp16:
    case StageKind::kBf16:
      return 2 * static_cast<uint64_t>(n);
    case StageKind::kInt8:
    case StageKind::kInt4:
      return compression::QuantizedSize(stage.kind == StageKind::kInt8 ? 8 : 4, n,
                                        stage.block_size);
    default:
      return absl::UnimplementedError(
          "a backend runs the value stages none, fp16, bf16, int8 and int4, not this one");
  }
}

absl::Status CudaBackend::EncodeValues(const compression::StageSpec& stage, uint64_t seed,
                                       ConstTypedPtr values, int64_t n,
                                       std::vector<uint8_t>* payload) {
  using compression::StageKind;
  STRAIT_ASSIGN_OR_RETURN(const uint64_t bytes, PayloadBytes(stage, n));
  // The value kernels read f32 (compression stays a leaf library): a bf16 tensor is widened first.
  const float* floats = values.f32();
  if (floats == nullptr) {
    floats = static_cast<float*>(codec_floats_.Get(sizeof(float) * n, stream_, &error_));
    if (floats == nullptr) return Sync();
    Convert(n, values, TypedPtr(const_cast<float*>(floats)));
  }
  auto* device =
      static_cast<uint8_t*>(codec_bytes_.Get(std::max<uint64_t>(bytes, 1), stream_, &error_));
  if (device == nullptr) return Sync();
  absl::Status launched;
  if (stage.kind == StageKind::kNone) {
    CopyOnDevice(device, floats, bytes);
  } else if (stage.kind == StageKind::kFp16 || stage.kind == StageKind::kBf16) {
    launched =
        compression::CastToHalfOnDevice(floats, n, stage.kind == StageKind::kBf16, device, stream_);
  } else {
    launched =
        compression::QuantizeOnDevice(floats, n, stage.kind == StageKind::kInt8 ? 8 : 4,
                                      stage.block_size, stage.stochastic, seed, device, stream_);
  }
  Check(launched);
  payload->resize(bytes);
  CopyToHost(payload->data(), device, bytes);
  return Sync();
}

absl::Status CudaBackend::DecodeValues(const compression::StageSpec& stage,
                                       absl::Span<const uint8_t> payload, int64_t n,
                                       TypedPtr values) {
  using compression::StageKind;
  STRAIT_ASSIGN_OR_RETURN(const uint64_t bytes, PayloadBytes(stage, n));
  if (payload.size() != bytes) {
    return absl::InvalidArgumentError(absl::StrCat("a payload of ", payload.size(), " bytes for ",
                                                   n, " values of this stage; it takes ", bytes));
  }
  auto* device =
      static_cast<uint8_t*>(codec_bytes_.Get(std::max<uint64_t>(bytes, 1), stream_, &error_));
  float* floats = values.f32();
  if (floats == nullptr) {
    floats = static_cast<float*>(codec_floats_.Get(sizeof(float) * n, stream_, &error_));
  }
  if (device == nullptr || floats == nullptr) return Sync();
  CopyToDevice(device, payload.data(), bytes);
  absl::Status launched;
  if (stage.kind == StageKind::kNone) {
    CopyOnDevice(floats, device, bytes);
  } else if (stage.kind == StageKind::kFp16 || stage.kind == StageKind::kBf16) {
    launched = compression::CastFromHalfOnDevice(device, n, stage.kind == StageKind::kBf16, floats,
                                                 stream_);
  } else {
    launched = compression::DequantizeOnDevice(device, n, stage.kind == StageKind::kInt8 ? 8 : 4,
                                               stage.block_size, floats, stream_);
  }
  Check(launched);
  if (!values.is_f32()) Convert(n, floats, values);
  return Sync();
}

}  // namespace

void* CudaStreamOf(Backend& backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  return cuda != nullptr ? cuda->stream() : nullptr;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device, Precision precision,
                                                           AttentionKernel attention,
                                                           bool timed_gemm) {
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
  absl::StatusOr<std::unique_ptr<LtMatmul>> lt =
      LtMatmul::Create(stream, timed_gemm ? AlgorithmChoice::kTimed : AlgorithmChoice::kHeuristic);
  double* partials = nullptr;
  if (lt.ok()) s = STRAIT_CUDA_CHECK(cudaMalloc(&partials, sizeof(double) * kSumSquaresBlocks));
  if (!lt.ok() || !s.ok()) {
    cudaStreamDestroy(stream);
    return lt.ok() ? s : lt.status();
  }
  const bool bf16 = precision == Precision::kBf16;
  // cuDNN's flash attention serves bf16 only; where it does not load (an older GPU or no cuDNN)
  // bf16 attention runs as batched products.
  std::unique_ptr<CudnnAttention> cudnn;
  if (bf16) {
    absl::StatusOr<std::unique_ptr<CudnnAttention>> made = CudnnAttention::Create(stream);
    if (made.ok()) cudnn = *std::move(made);
  }
  // The default: flash attention under bf16 (cuDNN), batched products under f32 (they measured
  // faster than the f32 kernels on an H200: docs/benchmarks.md).
  const bool fused = attention == AttentionKernel::kFused ||
                     (attention == AttentionKernel::kDefault && bf16 && cudnn != nullptr);
  return std::unique_ptr<Backend>(
      new CudaBackend(absl::StrCat("cuda:", device, " ", prop.name, bf16 ? " (bf16)" : ""), bf16,
                      fused, stream, *std::move(lt), std::move(cudnn), partials));
}

}  // namespace strait::site
