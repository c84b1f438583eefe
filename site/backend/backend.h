// The compute backend interface (DESIGN.md §3): memory, copies and the numeric ops the layers use.
//
// Every pointer an op takes is device memory of the backend that runs the op (host memory for the
// CPU backend), row-major. Tensors that hold activations, their gradients or product operands are
// typed (site/backend/dtype.h: f32, or bf16 under training.precision: bf16); master weights,
// gradient accumulators, optimizer state and per-row statistics are plain f32. An op reads each
// element, computes in f32 and rounds once when it stores an element of a typed output, so the CPU
// backend's loops and the CUDA kernels compute the same function (up to the order of sums).
//
// Ops are queued in order on the backend's one stream and may return before they finish; Sync()
// waits and reports the first error since the previous Sync() (CUDA-style sticky errors: ops
// themselves return nothing). A Backend is used by one thread at a time; distinct instances may
// run concurrently. Every op is deterministic: same inputs, same bits, on every run.
//
// Accumulating outputs (named so below) add to what is there, which is how parameter gradients sum
// over microbatches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "site/backend/dtype.h"

namespace strait::compression {
struct StageSpec;  // compression/chain_spec.h (not included: .cu files, C++17, include this header)
}  // namespace strait::compression

namespace strait::site {

enum class ActivationOp { kNone, kRelu, kGelu };

// How self-attention multiplies: batched matrix products through a [T, T] score matrix per head
// (kBatched), or one fused pass that keeps only a log-sum-exp per query (kFused: the CPU's loops,
// cuDNN's flash attention on bf16, a CUDA kernel on f32). kDefault is the backend's choice
// (cpu_backend.h, cuda_backend.h).
enum class AttentionKernel { kDefault, kBatched, kFused };

// The head widths the fused attention ops take: multiples of 8 up to kFusedAttentionMaxHeadDim.
inline constexpr int kFusedAttentionMaxHeadDim = 128;
inline bool FusedAttentionTakes(int dh) {
  return dh >= 8 && dh % 8 == 0 && dh <= kFusedAttentionMaxHeadDim;
}

// Self-attention over n samples of `tokens` tokens with `heads` heads of width dh, on the layout a
// qkv projection writes and the output projection reads: qkv [n * tokens, 3 * heads * dh] (per
// token every head's query, then every head's key, then every head's value) and out
// [n * tokens, heads * dh]. softmax(scale * q k^T) per head; causal: query t sees keys 0..t.
struct AttentionDims {
  int n = 0, tokens = 0, heads = 0, dh = 0;
  float scale = 1.0f;
  bool causal = false;
  int64_t width() const { return int64_t{heads} * dh; }  // of out; qkv is 3 x this
  int64_t rows() const { return int64_t{n} * tokens; }
  int64_t queries() const { return rows() * heads; }  // lse and delta entries, [n, heads, tokens]
};

// What a matrix product does with its result t = alpha * op(A) op(B) + beta * C before C stores it
// (cuBLASLt's epilogues). Forward of a linear layer: t += bias[column]; `pre` (optional, same
// shape and leading dimension as C) keeps t; C = act(t). Backward through an activation:
// C = t * act'(act_input[row, column]) (act_input: the forward's pre-activation, same leading
// dimension as C), and bias_grad[column] += the column sums of C as stored. The two halves do not
// mix: act_input is set only with act kNone and no bias. A bf16 C makes the bias a bf16 operand
// like A and B (it is rounded to bf16 before it is added, as PyTorch's autocast does), which lets
// cuBLASLt fuse it: cuBLASLt takes no f32 bias beside a bf16 output.
struct GemmEpilogue {
  const float* bias = nullptr;  // [n]
  ActivationOp act = ActivationOp::kNone;
  TypedPtr pre;                                // [m, n], ld ldc
  ActivationOp grad_of = ActivationOp::kNone;  // the activation whose derivative multiplies
  ConstTypedPtr act_input;                     // [m, n], ld ldc
  float* bias_grad = nullptr;                  // [n], accumulating
  bool empty() const {
    return bias == nullptr && act == ActivationOp::kNone && !pre &&
           grad_of == ActivationOp::kNone && bias_grad == nullptr;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu (2 threads)", "cuda:0 NVIDIA H100 ...".
  virtual std::string Name() const = 0;
  // The storage type of activations, their gradients and product operands on this backend.
  virtual DType activation_dtype() const = 0;

  // Memory. Allocate returns zeroed device memory aligned to 64 bytes (nullptr for 0 bytes); Free
  // releases it (nullptr is a no-op). Copies are ordered with the ops; CopyToHost blocks until the
  // bytes have arrived.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  virtual void CopyToDevice(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void Fill(TypedPtr x /*[n]*/, int64_t n, float value) = 0;
  // y = x stored in y's type (rounded to nearest even when narrower). y may alias x only when both
  // have one type.
  virtual void Convert(int64_t n, ConstTypedPtr x /*[n]*/, TypedPtr y /*[n]*/) = 0;

  // Waits for every queued op; returns the first error since the previous Sync (and clears it).
  virtual absl::Status Sync() = 0;

  // C[m, n] = alpha * op(A) op(B) + beta * C, then the epilogue, where op(A) is [m, k] (A is
  // [k, m] when trans_a) and op(B) is [k, n] (B is [n, k] when trans_b). Leading dimensions are
  // row strides, in elements. The products sum in f32. Under bf16 precision both operands are
  // rounded to bf16 before they multiply (exact for bf16 tensors: a tensor core's inputs).
  virtual void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, ConstTypedPtr a,
                    int lda, ConstTypedPtr b, int ldb, float beta, TypedPtr c, int ldc,
                    const GemmEpilogue& epilogue) = 0;
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, ConstTypedPtr a, int lda,
            ConstTypedPtr b, int ldb, float beta, TypedPtr c, int ldc) {
    Gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, GemmEpilogue{});
  }
  // `batch` independent Gemms; matrix i of A starts at a + i * stride_a (likewise B and C).
  virtual void GemmBatched(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                           ConstTypedPtr a, int lda, int64_t stride_a, ConstTypedPtr b, int ldb,
                           int64_t stride_b, float beta, TypedPtr c, int ldc, int64_t stride_c,
                           int batch) = 0;

  // True when self-attention with heads of width dh runs through the fused ops below (the backend's
  // choice, AttentionKernel; FusedAttentionTakes(dh)).
  virtual bool FusedAttention(int dh) const = 0;
  // out = softmax(scale * q k^T) v per head, and lse[b, h, t] = the log of the softmax's
  // denominator (with its maximum) for the backward. The [tokens, tokens] matrix is never stored.
  // Under bf16 the unnormalised probabilities are rounded to bf16 before they multiply v.
  virtual void FusedAttentionForward(const AttentionDims& dims, ConstTypedPtr qkv, TypedPtr out,
                                     float* lse /*[n, heads, tokens]*/) = 0;
  // dqkv (overwritten, qkv's layout) from dout and the forward's qkv, out and lse; delta
  // [n, heads, tokens] is scratch.
  virtual void FusedAttentionBackward(const AttentionDims& dims, ConstTypedPtr qkv,
                                      ConstTypedPtr out, const float* lse, ConstTypedPtr dout,
                                      TypedPtr dqkv, float* delta) = 0;

  // x[r, c] += bias[c] (bias may be null), then y = act(x), of the f32 sum (before x is stored).
  // y may alias x.
  virtual void BiasActivation(int64_t rows, int cols, const float* bias /*[cols]*/,
                              ActivationOp act, TypedPtr x /*[rows, cols]*/,
                              TypedPtr y /*[rows, cols]*/) = 0;
  // dx = dy * act'(x), where x is the pre-activation (for ReLU the output works too). dx may alias
  // dy.
  virtual void ActivationBackward(int64_t n, ActivationOp act, ConstTypedPtr x /*[n]*/,
                                  ConstTypedPtr dy /*[n]*/, TypedPtr dx /*[n]*/) = 0;
  // out[c] = beta * out[c] + sum over r of x[r * ldx + c], summed in a fixed order (the CPU: rows
  // in order; CUDA: chunks of rows in order). beta 0 does not read out.
  virtual void ColumnSum(int64_t rows, int cols, ConstTypedPtr x /*[rows, ldx]*/, int64_t ldx,
                         float beta, float* out /*[cols]*/) = 0;

  // Per row: y = (x - mean) * rstd * gamma + beta, eps 1e-5; saves mean and rstd for the backward.
  virtual void LayerNormForward(int64_t rows, int dim, ConstTypedPtr x /*[rows, dim]*/,
                                const float* gamma /*[dim]*/, const float* beta /*[dim]*/,
                                TypedPtr y /*[rows, dim]*/, float* mean /*[rows]*/,
                                float* rstd /*[rows]*/) = 0;
  // The residual add fused with the next LayerNorm: r = x + branch (stored in r's type), then
  // LayerNormForward of the stored r into y. r may alias x or branch.
  virtual void ResidualLayerNormForward(int64_t rows, int dim, ConstTypedPtr x,
                                        ConstTypedPtr branch, TypedPtr r, const float* gamma,
                                        const float* beta, TypedPtr y, float* mean,
                                        float* rstd) = 0;
  // Accumulating: dx, dgamma and dbeta.
  virtual void LayerNormBackward(int64_t rows, int dim, ConstTypedPtr x /*[rows, dim]*/,
                                 const float* gamma /*[dim]*/, const float* mean /*[rows]*/,
                                 const float* rstd /*[rows]*/, ConstTypedPtr dy /*[rows, dim]*/,
                                 TypedPtr dx /*[rows, dim]*/, float* dgamma /*[dim]*/,
                                 float* dbeta /*[dim]*/) = 0;

  // LLaMA's ops (site/nn/llama_block.h).
  // Per row: y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps), saved for the backward.
  virtual void RmsNormForward(int64_t rows, int dim, float eps, ConstTypedPtr x /*[rows, dim]*/,
                              const float* gamma /*[dim]*/, TypedPtr y /*[rows, dim]*/,
                              float* rstd /*[rows]*/) = 0;
  // Accumulating: dx and dgamma.
  virtual void RmsNormBackward(int64_t rows, int dim, ConstTypedPtr x, const float* gamma,
                               const float* rstd, ConstTypedPtr dy, TypedPtr dx, float* dgamma) = 0;
  // Rotary positions, in place: row r of x (stride ldx) is token r % tokens of its sample, and
  // holds `heads` heads of width dh from its first column; pair (2i, 2i+1) of every head turns by
  // the angle RotaryCosSin (site/backend/op_math.h) gives for that token. `inverse` turns back by
  // the same angle: the backward (a rotation's transpose is its inverse).
  virtual void Rotary(int64_t rows, int tokens, int heads, int dh, double theta, bool inverse,
                      TypedPtr x, int64_t ldx) = 0;
  // SwiGLU: gate_up [rows, 2f] (the gate's f columns, then the up projection's) ->
  // y [rows, f] = silu(gate) * up.
  virtual void SwiGluForward(int64_t rows, int f, ConstTypedPtr gate_up, TypedPtr y) = 0;
  // dgate_up [rows, 2f] (overwritten) from dy [rows, f] and the forward's gate_up.
  virtual void SwiGluBackward(int64_t rows, int f, ConstTypedPtr gate_up, ConstTypedPtr dy,
                              TypedPtr dgate_up) = 0;
  // Grouped-query attention on the attention ops' layout: qkv [rows, (heads + 2 kv_heads) dh]
  // (queries, then kv_heads keys, then kv_heads values) -> full [rows, 3 heads dh] (AttentionDims'
  // qkv), key and value head g repeated for the heads / kv_heads query heads g serves.
  virtual void RepeatKvHeads(int64_t rows, int heads, int kv_heads, int dh, ConstTypedPtr qkv,
                             TypedPtr full) = 0;
  // The backward: dqkv (overwritten) gets dfull's queries, and each key and value head the sum of
  // the gradients of its copies, in query-head order.
  virtual void SumKvHeads(int64_t rows, int heads, int kv_heads, int dh, ConstTypedPtr dfull,
                          TypedPtr dqkv) = 0;

  // Per row: y = softmax(scale * x). Causal: row r covers columns [0, r % cols] only and the later
  // columns get 0 (self-attention where query r % cols sees the keys up to its own position).
  // y may alias x.
  virtual void SoftmaxRows(int64_t rows, int cols, float scale, bool causal,
                           ConstTypedPtr x /*[rows, cols]*/, TypedPtr y /*[rows, cols]*/) = 0;
  // dx = scale * y * (dy - sum(dy * y)) per row, where y is SoftmaxRows' output. dx may alias dy.
  virtual void SoftmaxRowsBackward(int64_t rows, int cols, float scale, ConstTypedPtr y,
                                   ConstTypedPtr dy, TypedPtr dx) = 0;
  // The fused classifier: softmax cross-entropy per row, the logits' gradient written over the
  // logits (no probabilities kept): loss[r] = -log softmax(logits[r])[label[r]], correct[r] = 1
  // when the first maximal logit is the label's, logits[r] = (softmax - onehot) * grad_scale.
  // Labels outside [0, classes) give loss 0, correct 0 and a zero gradient row.
  virtual void ClassifierLoss(int64_t rows, int classes, TypedPtr logits /*[rows, classes]*/,
                              const int32_t* labels /*[rows]*/, float grad_scale,
                              float* loss /*[rows]*/, int32_t* correct /*[rows]*/) = 0;

  // y[i] = x[i] * keep / (1 - p), keep = CounterUniform(key, offset + i) >= p
  // (site/backend/counter_rng.h). `offset` is the index of x[0] in the whole tensor the mask is
  // keyed for, so a worker that holds rows [r0, r1) of a microbatch (offset = r0 * row width) drops
  // exactly what a pass over the whole microbatch drops. The same call on dy is the backward. y may
  // alias x.
  virtual void Dropout(int64_t n, float p, uint64_t key, int64_t offset, ConstTypedPtr x /*[n]*/,
                       TypedPtr y /*[n]*/) = 0;

  // y += alpha * x.
  virtual void Axpy(int64_t n, float alpha, ConstTypedPtr x /*[n]*/, TypedPtr y /*[n]*/) = 0;
  // y = alpha * x + beta * y, each product rounded (no fused multiply-add), so every backend
  // gives the same bits.
  virtual void Axpby(int64_t n, float alpha, ConstTypedPtr x /*[n]*/, float beta,
                     TypedPtr y /*[n]*/) = 0;
  // dst[r * ld_dst + c] = src[r * ld_src + c]; ld_src 0 repeats the one source row.
  virtual void Copy2D(int64_t rows, int cols, ConstTypedPtr src, int64_t ld_src, TypedPtr dst,
                      int64_t ld_dst) = 0;
  // Images [n, channels, height, width] -> patches [n, (height/p) * (width/p), channels * p * p],
  // patches in row-major grid order, each flattened (channel, row, column).
  virtual void ExtractPatches(int n, int channels, int height, int width, int p,
                              ConstTypedPtr images, TypedPtr patches) = 0;
  // x rows (b, t) of width ldx hold heads h at columns [h * dh, (h + 1) * dh):
  // y[((b * heads + h) * tokens + t) * dh + j] = x[(b * tokens + t) * ldx + h * dh + j].
  virtual void HeadsToBatch(int n, int tokens, int heads, int dh, ConstTypedPtr x, int64_t ldx,
                            TypedPtr y /*[n, heads, tokens, dh]*/) = 0;
  // The inverse of HeadsToBatch: writes x's head columns, leaves its other columns alone.
  virtual void BatchToHeads(int n, int tokens, int heads, int dh,
                            ConstTypedPtr y /*[n, heads, tokens, dh]*/, TypedPtr x,
                            int64_t ldx) = 0;

  // y[r] = table[ids[r]]: ids are token ids held exactly in floats; an id outside [0, vocab) gives
  // a row of zeros.
  virtual void EmbeddingLookup(int64_t rows, int dim, int vocab, const float* ids /*[rows]*/,
                               const float* table /*[vocab, dim]*/, TypedPtr y /*[rows, dim]*/) = 0;
  // Accumulating: dtable[ids[r]] += dy[r], the rows added in order r = 0, 1, ... (ids outside
  // [0, vocab) are skipped).
  virtual void EmbeddingBackward(int64_t rows, int dim, int vocab, const float* ids /*[rows]*/,
                                 ConstTypedPtr dy /*[rows, dim]*/,
                                 float* dtable /*[vocab, dim]*/) = 0;

  // Optimizer updates over a whole parameter arena; g = grad * grad_scale (clipping). When
  // param_copy is set, the updated parameters are also stored there in its type (the product
  // operands' copy of the weights, written once per step by the same pass).
  // SGD: g += weight_decay * param; velocity = momentum * velocity + g; param -= lr * velocity.
  virtual void SgdUpdate(int64_t n, float lr, float momentum, float weight_decay, float grad_scale,
                         float* param, const float* grad, float* velocity, TypedPtr param_copy) = 0;
  // AdamW: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  // param -= lr * ((m / bias1) / (sqrt(v / bias2) + eps) + weight_decay * param).
  virtual void AdamWUpdate(int64_t n, float lr, float beta1, float beta2, float eps,
                           float weight_decay, float bias1, float bias2, float grad_scale,
                           float* param, const float* grad, float* m, float* v,
                           TypedPtr param_copy) = 0;
  // Sum of x[i]^2 in double, in a fixed order; blocks until the result is on the host. Returns
  // NaN if an earlier op failed (Sync() reports why).
  virtual double SumSquares(int64_t n, const float* x /*[n]*/) = 0;

  // A codec chain's value stage (compression/chain_spec.h: none, fp16, bf16, int8 or int4; top-k
  // is Unimplemented: its error feedback lives on the host) on n elements of `values` in this
  // backend's memory: `payload` (host memory) gets byte for byte what the stage writes for the same
  // floats on the CPU; CodecChain::EncodeValuePayload finishes the frame. `seed`: the chain's
  // stochastic-rounding seed for this tensor (CodecChain::next_seed). Blocks until the payload is
  // on the host: a GPU site copies the quantized bytes, not the fp32 tensor. Errors name the stage.
  virtual absl::Status EncodeValues(const compression::StageSpec& stage, uint64_t seed,
                                    ConstTypedPtr values /*[n]*/, int64_t n,
                                    std::vector<uint8_t>* payload) = 0;
  // The inverse: a payload of that stage (host memory; a TensorDecoder checked its size for n
  // values) into `values` (this backend's memory, its type).
  virtual absl::Status DecodeValues(const compression::StageSpec& stage,
                                    absl::Span<const uint8_t> payload, int64_t n,
                                    TypedPtr values /*[n]*/) = 0;
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

  void* data() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }
  int32_t* i32() const { return static_cast<int32_t*>(ptr_); }
  // The buffer as a tensor of `dtype` starting `elements` in.
  TypedPtr typed(DType dtype, int64_t elements = 0) const {
    return TypedPtr(ptr_, dtype) + elements;
  }
  size_t bytes() const { return bytes_; }

 private:
  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace strait::site
