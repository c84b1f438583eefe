// The compute backend interface (DESIGN.md §3): memory, copies and the numeric ops the layers use.
//
// Every pointer an op takes is device memory of the backend that runs the op (host memory for the
// CPU backend), row-major. Ops are queued in order on the backend's one stream and may return
// before they finish; Sync() waits and reports the first error since the previous Sync()
// (CUDA-style sticky errors: ops themselves return nothing). A Backend is used by one thread at a
// time; distinct instances may run concurrently. Every op is deterministic: same inputs, same bits,
// on every run.
//
// Accumulating outputs (named so below) add to what is there, which is how parameter gradients sum
// over microbatches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace strait::site {

enum class ActivationOp { kNone, kRelu, kGelu };

// How self-attention multiplies: batched matrix products through a [T, T] score matrix per head
// (kBatched), or one fused kernel per pass that keeps only a log-sum-exp per query (kFused).
// kDefault is the backend's choice (cpu_backend.h, cuda_backend.h).
enum class AttentionKernel { kDefault, kBatched, kFused };

// The head widths the fused attention ops take: multiples of 8 up to kFusedAttentionMaxHeadDim.
inline constexpr int kFusedAttentionMaxHeadDim = 64;
inline bool FusedAttentionTakes(int dh) {
  return dh >= 8 && dh % 8 == 0 && dh <= kFusedAttentionMaxHeadDim;
}

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu (2 threads)", "cuda:0 NVIDIA H100 ...".
  virtual std::string Name() const = 0;

  // Memory. Allocate returns zeroed device memory aligned to 64 bytes (nullptr for 0 bytes); Free
  // releases it (nullptr is a no-op). Copies are ordered with the ops; CopyToHost blocks until the
  // bytes have arrived.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  virtual void CopyToDevice(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void Fill(float* x /*[n]*/, int64_t n, float value) = 0;

  // Waits for every queued op; returns the first error since the previous Sync (and clears it).
  virtual absl::Status Sync() = 0;

  // C[m, n] = alpha * op(A) op(B) + beta * C, where op(A) is [m, k] (A is [k, m] when trans_a) and
  // op(B) is [k, n] (B is [n, k] when trans_b). Leading dimensions are row strides.
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) = 0;
  // `batch` independent Gemms; matrix i of A starts at a + i * stride_a (likewise B and C).
  virtual void GemmBatched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                           const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                           int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c,
                           int batch) = 0;

  // True when self-attention with heads of width dh runs through the fused ops below (the backend's
  // choice, AttentionKernel; FusedAttentionTakes(dh)).
  virtual bool FusedAttention(int dh) const = 0;
  // Per head b of `batch`, on q, k, v, o [batch, tokens, dh] (rows 16-byte aligned):
  // o = softmax(scale * q k^T) v, causal as SoftmaxRows, and lse[b, t] = the log of the softmax's
  // denominator (with its maximum) for the backward. Under bf16 products q, k, v and the
  // unnormalised probabilities are rounded to bf16 before they multiply, as the tensor cores see
  // them. The [tokens, tokens] matrix is never stored.
  virtual void FusedAttentionForward(int batch, int tokens, int dh, float scale, bool causal,
                                     const float* q, const float* k, const float* v, float* o,
                                     float* lse /*[batch, tokens]*/) = 0;
  // The gradients dq, dk, dv (overwritten) from d_o and the forward's o and lse; delta [batch,
  // tokens] is scratch.
  virtual void FusedAttentionBackward(int batch, int tokens, int dh, float scale, bool causal,
                                      const float* q, const float* k, const float* v,
                                      const float* o, const float* lse, const float* d_o,
                                      float* delta, float* dq, float* dk, float* dv) = 0;

  // x[r, c] += bias[c] (bias may be null), then y = act(x). y may alias x.
  virtual void BiasActivation(int64_t rows, int cols, const float* bias /*[cols]*/,
                              ActivationOp act, float* x /*[rows, cols]*/,
                              float* y /*[rows, cols]*/) = 0;
  // dx = dy * act'(x), where x is the pre-activation (for ReLU the output works too). dx may alias
  // dy.
  virtual void ActivationBackward(int64_t n, ActivationOp act, const float* x /*[n]*/,
                                  const float* dy /*[n]*/, float* dx /*[n]*/) = 0;
  // out[c] = beta * out[c] + sum over r (in order) of x[r * ldx + c].
  virtual void ColumnSum(int64_t rows, int cols, const float* x /*[rows, ldx]*/, int64_t ldx,
                         float beta, float* out /*[cols]*/) = 0;

  // Per row: y = (x - mean) * rstd * gamma + beta, eps 1e-5; saves mean and rstd for the backward.
  virtual void LayerNormForward(int64_t rows, int dim, const float* x /*[rows, dim]*/,
                                const float* gamma /*[dim]*/, const float* beta /*[dim]*/,
                                float* y /*[rows, dim]*/, float* mean /*[rows]*/,
                                float* rstd /*[rows]*/) = 0;
  // Accumulating: dx, dgamma and dbeta.
  virtual void LayerNormBackward(int64_t rows, int dim, const float* x /*[rows, dim]*/,
                                 const float* gamma /*[dim]*/, const float* mean /*[rows]*/,
                                 const float* rstd /*[rows]*/, const float* dy /*[rows, dim]*/,
                                 float* dx /*[rows, dim]*/, float* dgamma /*[dim]*/,
                                 float* dbeta /*[dim]*/) = 0;

  // Per row: y = softmax(scale * x). Causal: row r covers columns [0, r % cols] only and the later
  // columns get 0 (self-attention where query r % cols sees the keys up to its own position).
  // y may alias x.
  virtual void SoftmaxRows(int64_t rows, int cols, float scale, bool causal,
                           const float* x /*[rows, cols]*/, float* y /*[rows, cols]*/) = 0;
  // dx = scale * y * (dy - sum(dy * y)) per row, where y is SoftmaxRows' output. dx may alias dy.
  virtual void SoftmaxRowsBackward(int64_t rows, int cols, float scale, const float* y,
                                   const float* dy, float* dx) = 0;
  // Softmax cross-entropy per row: loss[r] = -log softmax(logits[r])[label[r]], correct[r] = 1 when
  // the first maximal logit is the label's, and dlogits = (softmax - onehot) * grad_scale.
  // Labels outside [0, classes) give loss 0, correct 0 and a zero gradient row. dlogits must not
  // overlap logits.
  virtual void CrossEntropy(int64_t rows, int classes, const float* logits /*[rows, classes]*/,
                            const int32_t* labels /*[rows]*/, float grad_scale,
                            float* loss /*[rows]*/, int32_t* correct /*[rows]*/,
                            float* dlogits /*[rows, classes]*/) = 0;

  // y[i] = x[i] * keep / (1 - p), keep = CounterUniform(key, offset + i) >= p
  // (site/backend/counter_rng.h). `offset` is the index of x[0] in the whole tensor the mask is
  // keyed for, so a worker that holds rows [r0, r1) of a microbatch (offset = r0 * row width) drops
  // exactly what a pass over the whole microbatch drops. The same call on dy is the backward. y may
  // alias x.
  virtual void Dropout(int64_t n, float p, uint64_t key, int64_t offset, const float* x /*[n]*/,
                       float* y /*[n]*/) = 0;

  // y += alpha * x.
  virtual void Axpy(int64_t n, float alpha, const float* x /*[n]*/, float* y /*[n]*/) = 0;
  // y = alpha * x + beta * y, each product rounded (no fused multiply-add), so every backend
  // gives the same bits.
  virtual void Axpby(int64_t n, float alpha, const float* x /*[n]*/, float beta,
                     float* y /*[n]*/) = 0;
  // dst[r * ld_dst + c] = src[r * ld_src + c]; ld_src 0 repeats the one source row.
  virtual void Copy2D(int64_t rows, int cols, const float* src, int64_t ld_src, float* dst,
                      int64_t ld_dst) = 0;
  // Images [n, channels, height, width] -> patches [n, (height/p) * (width/p), channels * p * p],
  // patches in row-major grid order, each flattened (channel, row, column).
  virtual void ExtractPatches(int n, int channels, int height, int width, int p,
                              const float* images, float* patches) = 0;
  // x rows (b, t) of width ldx hold heads h at columns [h * dh, (h + 1) * dh):
  // y[((b * heads + h) * tokens + t) * dh + j] = x[(b * tokens + t) * ldx + h * dh + j].
  virtual void HeadsToBatch(int n, int tokens, int heads, int dh, const float* x, int64_t ldx,
                            float* y /*[n, heads, tokens, dh]*/) = 0;
  // The inverse of HeadsToBatch: writes x's head columns, leaves its other columns alone.
  virtual void BatchToHeads(int n, int tokens, int heads, int dh,
                            const float* y /*[n, heads, tokens, dh]*/, float* x, int64_t ldx) = 0;

  // y[r] = table[ids[r]]: ids are token ids held exactly in floats; an id outside [0, vocab) gives
  // a row of zeros.
  virtual void EmbeddingLookup(int64_t rows, int dim, int vocab, const float* ids /*[rows]*/,
                               const float* table /*[vocab, dim]*/, float* y /*[rows, dim]*/) = 0;
  // Accumulating: dtable[ids[r]] += dy[r], the rows added in order r = 0, 1, ... (ids outside
  // [0, vocab) are skipped).
  virtual void EmbeddingBackward(int64_t rows, int dim, int vocab, const float* ids /*[rows]*/,
                                 const float* dy /*[rows, dim]*/,
                                 float* dtable /*[vocab, dim]*/) = 0;

  // Optimizer updates over a whole parameter arena; g = grad * grad_scale (clipping).
  // SGD: g += weight_decay * param; velocity = momentum * velocity + g; param -= lr * velocity.
  virtual void SgdUpdate(int64_t n, float lr, float momentum, float weight_decay, float grad_scale,
                         float* param, const float* grad, float* velocity) = 0;
  // AdamW: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // param -= lr * ((m / bias1) / (sqrt(v / bias2) + eps) + weight_decay * param).
  virtual void AdamWUpdate(int64_t n, float lr, float beta1, float beta2, float eps,
                           float weight_decay, float bias1, float bias2, float grad_scale,
                           float* param, const float* grad, float* m, float* v) = 0;
  // Sum of x[i]^2 in double, in a fixed order; blocks until the result is on the host. Returns
  // NaN if an earlier op failed (Sync() reports why).
  virtual double SumSquares(int64_t n, const float* x /*[n]*/) = 0;
};

// Owns one allocation of a Backend; movable, not copyable. The Backend must outlive it.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static absl::StatusOr<DeviceBuffer> Create(Backend* backend, size_t bytes);
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  float* f32() const { return static_cast<float*>(ptr_); }
  int32_t* i32() const { return static_cast<int32_t*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace strait::site
