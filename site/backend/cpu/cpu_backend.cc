// The CPU backend: typed tensors (f32, or bf16 emulated: widened, computed in f32, rounded once on
// the store) adapted to the f32 loops of cpu_loops.cc.
#include "site/backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/chain_spec.h"
#include "compression/codec_stage.h"
#include "core/status.h"
#include "site/backend/cpu/cpu_attention.h"
#include "site/backend/cpu/cpu_loops.h"
#include "site/backend/cpu/f32_views.h"
#include "site/backend/cpu/llama_loops.h"
#include "site/backend/cpu/thread_pool.h"
#include "site/backend/op_math.h"

namespace strait::site {
namespace {

using cpu::F32In;
using cpu::F32Out;

// n elements from src to dst, converted when their types differ.
void CopyElements(ConstTypedPtr src, TypedPtr dst, int64_t n) {
  if (n <= 0) return;
  if (src.dtype() == dst.dtype()) {
    std::memmove(dst.data(), src.data(), static_cast<size_t>(n) * SizeOf(src.dtype()));
  } else if (dst.is_f32()) {
    cpu::Widen(n, src, dst.f32());
  } else {
    cpu::Narrow(n, src.f32(), dst);
  }
}

class CpuBackend final : public Backend {
 public:
  // OpenBLAS runs single-threaded inside our pool: its own worker threads busy-wait between calls
  // and would compete with the pool for the cores.
  CpuBackend(int threads, Precision precision, AttentionKernel attention)
      : threads_(threads),
        bf16_(precision == Precision::kBf16),
        fused_attention_(attention == AttentionKernel::kFused),
        pool_(threads) {
    openblas_set_num_threads(1);
  }

  using Backend::Gemm;

  std::string Name() const override {
    return absl::StrCat("cpu (", threads_, " threads", bf16_ ? ", bf16" : "", ")");
  }
  DType activation_dtype() const override { return bf16_ ? DType::kBf16 : DType::kF32; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    if (bytes == 0) return nullptr;
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cpu: cannot allocate ", bytes, " bytes"));
    }
    std::memset(p, 0, rounded);
    return p;
  }
  void Free(void* ptr) override { std::free(ptr); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override { Copy(dst, src, bytes); }
  void CopyToHost(void* dst, const void* src, size_t bytes) override { Copy(dst, src, bytes); }
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override { Copy(dst, src, bytes); }
  void Fill(TypedPtr x, int64_t n, float value) override {
    if (x.is_f32()) {
      std::fill(x.f32(), x.f32() + n, value);
    } else {
      std::fill_n(static_cast<uint16_t*>(x.data()), n, Bf16Bits(value));
    }
  }
  void Convert(int64_t n, ConstTypedPtr x, TypedPtr y) override { CopyElements(x, y, n); }
  absl::Status Sync() override { return absl::OkStatus(); }

  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, ConstTypedPtr a, int lda,
            ConstTypedPtr b, int ldb, float beta, TypedPtr c, int ldc,
            const GemmEpilogue& e) override {
    if (m == 0 || n == 0) return;
    const F32Operand fa(*this, a, MatrixSpan(ta ? k : m, ta ? m : k, lda));
    const F32Operand fb(*this, b, MatrixSpan(tb ? n : k, tb ? k : n, ldb));
    const int64_t span = MatrixSpan(m, n, ldc);
    F32Out fc(c, span, beta != 0.0f || span != int64_t{m} * n);
    cpu::Gemm(pool_, ta, tb, m, n, k, alpha, fa.get(), lda, fb.get(), ldb, beta, fc.get(), ldc);
    if (!e.empty()) ApplyEpilogue(m, n, ldc, e, !c.is_f32(), fc.get());
    fc.Commit();
    if (e.bias_grad != nullptr) ColumnSum(m, n, c, ldc, 1.0f, e.bias_grad);  // C as stored
  }

  void GemmBatched(bool ta, bool tb, int m, int n, int k, float alpha, ConstTypedPtr a, int lda,
                   int64_t stride_a, ConstTypedPtr b, int ldb, int64_t stride_b, float beta,
                   TypedPtr c, int ldc, int64_t stride_c, int batch) override {
    if (m == 0 || n == 0 || batch == 0) return;
    const F32Operand fa(*this, a, MatrixSpan(ta ? k : m, ta ? m : k, lda, stride_a, batch));
    const F32Operand fb(*this, b, MatrixSpan(tb ? n : k, tb ? k : n, ldb, stride_b, batch));
    const int64_t span = MatrixSpan(m, n, ldc, stride_c, batch);
    F32Out fc(c, span, beta != 0.0f || span != int64_t{m} * n * batch);
    cpu::GemmBatched(pool_, ta, tb, m, n, k, alpha, fa.get(), lda, stride_a, fb.get(), ldb,
                     stride_b, beta, fc.get(), ldc, stride_c, batch);
    fc.Commit();
  }

  bool FusedAttention(int dh) const override { return fused_attention_ && FusedAttentionTakes(dh); }
  void FusedAttentionForward(const AttentionDims& d, ConstTypedPtr qkv, TypedPtr out,
                             float* lse) override {
    const int64_t part = d.rows() * d.width();
    std::vector<float> q(part), k(part), v(part), o(part);
    Gather(d, qkv, 3 * d.width(), {q.data(), k.data(), v.data()});
    CpuFusedAttentionForward(pool_, d.n * d.heads, d.tokens, d.dh, d.scale, d.causal, bf16_,
                             q.data(), k.data(), v.data(), o.data(), lse);
    Scatter(d, {o.data()}, out, d.width());
  }
  void FusedAttentionBackward(const AttentionDims& d, ConstTypedPtr qkv, ConstTypedPtr out,
                              const float* lse, ConstTypedPtr dout, TypedPtr dqkv,
                              float* delta) override {
    const int64_t part = d.rows() * d.width();
    std::vector<float> q(part), k(part), v(part), o(part), g(part), dq(part), dk(part), dv(part);
    Gather(d, qkv, 3 * d.width(), {q.data(), k.data(), v.data()});
    Gather(d, out, d.width(), {o.data()});
    Gather(d, dout, d.width(), {g.data()});
    CpuFusedAttentionBackward(pool_, d.n * d.heads, d.tokens, d.dh, d.scale, d.causal, bf16_,
                              q.data(), k.data(), v.data(), o.data(), lse, g.data(), delta,
                              dq.data(), dk.data(), dv.data());
    Scatter(d, {dq.data(), dk.data(), dv.data()}, dqkv, 3 * d.width());
  }

  void BiasActivation(int64_t rows, int cols, const float* bias, ActivationOp act, TypedPtr x,
                      TypedPtr y) override {
    const int64_t n = rows * cols;
    F32Out fx(x, n, true);
    if (x.data() == y.data()) {
      cpu::BiasActivation(pool_, rows, cols, bias, act, fx.get(), fx.get());
      fx.Commit();
      return;
    }
    F32Out fy(y, n, false);
    cpu::BiasActivation(pool_, rows, cols, bias, act, fx.get(), fy.get());
    fx.Commit();
    fy.Commit();
  }
  void ActivationBackward(int64_t n, ActivationOp act, ConstTypedPtr x, ConstTypedPtr dy,
                          TypedPtr dx) override {
    F32In fx(x, n), fdy(dy, n);
    F32Out fdx(dx, n, false);
    cpu::ActivationBackward(pool_, n, act, fx.get(), fdy.get(), fdx.get());
    fdx.Commit();
  }
  void ColumnSum(int64_t rows, int cols, ConstTypedPtr x, int64_t ldx, float beta,
                 float* out) override {
    F32In fx(x, MatrixSpan(static_cast<int>(rows), cols, static_cast<int>(ldx)));
    cpu::ColumnSum(pool_, rows, cols, fx.get(), ldx, beta, out);
  }

  void LayerNormForward(int64_t rows, int dim, ConstTypedPtr x, const float* gamma,
                        const float* beta, TypedPtr y, float* mean, float* rstd) override {
    F32In fx(x, rows * dim);
    F32Out fy(y, rows * dim, false);
    cpu::LayerNormForward(pool_, rows, dim, fx.get(), gamma, beta, fy.get(), mean, rstd);
    fy.Commit();
  }
  void ResidualLayerNormForward(int64_t rows, int dim, ConstTypedPtr x, ConstTypedPtr branch,
                                TypedPtr r, const float* gamma, const float* beta, TypedPtr y,
                                float* mean, float* rstd) override {
    const int64_t n = rows * dim;
    std::vector<float> sum(n);
    {
      F32In fx(x, n), fb(branch, n);
      for (int64_t i = 0; i < n; ++i) sum[i] = cpu::StoredAs(r.dtype(), fx.get()[i] + fb.get()[i]);
    }
    cpu::Narrow(n, sum.data(), r);
    F32Out fy(y, n, false);
    cpu::LayerNormForward(pool_, rows, dim, sum.data(), gamma, beta, fy.get(), mean, rstd);
    fy.Commit();
  }
  void LayerNormBackward(int64_t rows, int dim, ConstTypedPtr x, const float* gamma,
                         const float* mean, const float* rstd, ConstTypedPtr dy, TypedPtr dx,
                         float* dgamma, float* dbeta) override {
    const int64_t n = rows * dim;
    F32In fx(x, n), fdy(dy, n);
    F32Out fdx(dx, n, true);
    cpu::LayerNormBackward(pool_, rows, dim, fx.get(), gamma, mean, rstd, fdy.get(), fdx.get(),
                           dgamma, dbeta);
    fdx.Commit();
  }

  void RmsNormForward(int64_t rows, int dim, float eps, ConstTypedPtr x, const float* gamma,
                      TypedPtr y, float* rstd) override {
    F32In fx(x, rows * dim);
    F32Out fy(y, rows * dim, false);
    cpu::RmsNormForward(pool_, rows, dim, eps, fx.get(), gamma, fy.get(), rstd);
    fy.Commit();
  }
  void RmsNormBackward(int64_t rows, int dim, ConstTypedPtr x, const float* gamma,
                       const float* rstd, ConstTypedPtr dy, TypedPtr dx, float* dgamma) override {
    F32In fx(x, rows * dim), fdy(dy, rows * dim);
    F32Out fdx(dx, rows * dim, true);
    cpu::RmsNormBackward(pool_, rows, dim, fx.get(), gamma, rstd, fdy.get(), fdx.get(), dgamma);
    fdx.Commit();
  }
  void Rotary(int64_t rows, int tokens, int heads, int dh, double theta, bool inverse, TypedPtr x,
              int64_t ldx) override {
    F32Out fx(x, MatrixSpan(static_cast<int>(rows), heads * dh, static_cast<int>(ldx)), true);
    cpu::Rotary(pool_, rows, tokens, heads, dh, theta, inverse, fx.get(), ldx);
    fx.Commit();
  }
  void SwiGluForward(int64_t rows, int f, ConstTypedPtr gate_up, TypedPtr y) override {
    F32In fg(gate_up, rows * 2 * f);
    F32Out fy(y, rows * f, false);
    cpu::SwiGluForward(pool_, rows, f, fg.get(), fy.get());
    fy.Commit();
  }
  void SwiGluBackward(int64_t rows, int f, ConstTypedPtr gate_up, ConstTypedPtr dy,
                      TypedPtr dgate_up) override {
    F32In fg(gate_up, rows * 2 * f), fdy(dy, rows * f);
    F32Out fd(dgate_up, rows * 2 * f, false);
    cpu::SwiGluBackward(pool_, rows, f, fg.get(), fdy.get(), fd.get());
    fd.Commit();
  }
  void RepeatKvHeads(int64_t rows, int heads, int kv_heads, int dh, ConstTypedPtr qkv,
                     TypedPtr full) override {
    F32In fq(qkv, rows * (heads + 2 * kv_heads) * dh);
    F32Out ff(full, rows * 3 * heads * dh, false);
    cpu::RepeatKvHeads(pool_, rows, heads, kv_heads, dh, fq.get(), ff.get());
    ff.Commit();
  }
  void SumKvHeads(int64_t rows, int heads, int kv_heads, int dh, ConstTypedPtr dfull,
                  TypedPtr dqkv) override {
    F32In ff(dfull, rows * 3 * heads * dh);
    F32Out fq(dqkv, rows * (heads + 2 * kv_heads) * dh, false);
    cpu::SumKvHeads(pool_, rows, heads, kv_heads, dh, ff.get(), fq.get());
    fq.Commit();
  }

  void SoftmaxRows(int64_t rows, int cols, float scale, bool causal, ConstTypedPtr x,
                   TypedPtr y) override {
    F32In fx(x, rows * cols);
    F32Out fy(y, rows * cols, false);
    cpu::SoftmaxRows(pool_, rows, cols, scale, causal, fx.get(), fy.get());
    fy.Commit();
  }
  void SoftmaxRowsBackward(int64_t rows, int cols, float scale, ConstTypedPtr y, ConstTypedPtr dy,
                           TypedPtr dx) override {
    F32In fy(y, rows * cols), fdy(dy, rows * cols);
    F32Out fdx(dx, rows * cols, false);
    cpu::SoftmaxRowsBackward(pool_, rows, cols, scale, fy.get(), fdy.get(), fdx.get());
    fdx.Commit();
  }
  void ClassifierLoss(int64_t rows, int classes, TypedPtr logits, const int32_t* labels,
                      float grad_scale, float* loss, int32_t* correct) override {
    F32Out f(logits, rows * classes, true);
    cpu::ClassifierLoss(pool_, rows, classes, f.get(), labels, grad_scale, loss, correct);
    f.Commit();
  }

  void Dropout(int64_t n, float p, uint64_t key, int64_t offset, ConstTypedPtr x,
               TypedPtr y) override {
    F32In fx(x, n);
    F32Out fy(y, n, false);
    cpu::Dropout(pool_, n, p, key, offset, fx.get(), fy.get());
    fy.Commit();
  }
  void Axpy(int64_t n, float alpha, ConstTypedPtr x, TypedPtr y) override {
    F32In fx(x, n);
    F32Out fy(y, n, true);
    cpu::Axpy(pool_, n, alpha, fx.get(), fy.get());
    fy.Commit();
  }
  void Axpby(int64_t n, float alpha, ConstTypedPtr x, float beta, TypedPtr y) override {
    F32In fx(x, n);
    F32Out fy(y, n, true);
    cpu::Axpby(pool_, n, alpha, fx.get(), beta, fy.get());
    fy.Commit();
  }
  void Copy2D(int64_t rows, int cols, ConstTypedPtr src, int64_t ld_src, TypedPtr dst,
              int64_t ld_dst) override {
    for (int64_t r = 0; r < rows; ++r) CopyElements(src + r * ld_src, dst + r * ld_dst, cols);
  }
  void ExtractPatches(int n, int channels, int height, int width, int p, ConstTypedPtr images,
                      TypedPtr patches) override {
    const int gh = height / p, gw = width / p;
    const int64_t patch_size = int64_t{channels} * p * p;
    for (int b = 0; b < n; ++b) {
      ConstTypedPtr img = images + int64_t{b} * channels * height * width;
      for (int py = 0; py < gh; ++py) {
        for (int px = 0; px < gw; ++px) {
          TypedPtr out = patches + (int64_t{b} * gh * gw + py * gw + px) * patch_size;
          for (int c = 0; c < channels; ++c) {
            for (int i = 0; i < p; ++i) {
              CopyElements(img + (int64_t{c} * height + py * p + i) * width + px * p,
                           out + (c * p + i) * p, p);
            }
          }
        }
      }
    }
  }
  void HeadsToBatch(int n, int tokens, int heads, int dh, ConstTypedPtr x, int64_t ldx,
                    TypedPtr y) override {
    for (int b = 0; b < n; ++b) {
      for (int h = 0; h < heads; ++h) {
        for (int t = 0; t < tokens; ++t) {
          CopyElements(x + (int64_t{b} * tokens + t) * ldx + h * dh,
                       y + ((int64_t{b} * heads + h) * tokens + t) * dh, dh);
        }
      }
    }
  }
  void BatchToHeads(int n, int tokens, int heads, int dh, ConstTypedPtr y, TypedPtr x,
                    int64_t ldx) override {
    for (int b = 0; b < n; ++b) {
      for (int h = 0; h < heads; ++h) {
        for (int t = 0; t < tokens; ++t) {
          CopyElements(y + ((int64_t{b} * heads + h) * tokens + t) * dh,
                       x + (int64_t{b} * tokens + t) * ldx + h * dh, dh);
        }
      }
    }
  }

  void EmbeddingLookup(int64_t rows, int dim, int vocab, const float* ids, const float* table,
                       TypedPtr y) override {
    pool_.ParallelFor(rows, 64, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t id = TokenId(ids[r], vocab);
        if (id < 0) {
          Fill(y + r * dim, dim, 0.0f);
        } else {
          CopyElements(table + id * dim, y + r * dim, dim);
        }
      }
    });
  }
  void EmbeddingBackward(int64_t rows, int dim, int vocab, const float* ids, ConstTypedPtr dy,
                         float* dtable) override {
    F32In fdy(dy, rows * dim);
    cpu::EmbeddingBackward(rows, dim, vocab, ids, fdy.get(), dtable);
  }

  void SgdUpdate(int64_t n, float lr, float momentum, float weight_decay, float grad_scale,
                 float* param, const float* grad, float* velocity, TypedPtr param_copy) override {
    cpu::SgdUpdate(pool_, n, lr, momentum, weight_decay, grad_scale, param, grad, velocity);
    if (param_copy) CopyElements(param, param_copy, n);
  }
  void AdamWUpdate(int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                   float bias1, float bias2, float grad_scale, float* param, const float* grad,
                   float* m, float* v, TypedPtr param_copy) override {
    cpu::AdamWUpdate(pool_, n, lr, beta1, beta2, eps, weight_decay, bias1, bias2, grad_scale, param,
                     grad, m, v);
    if (param_copy) CopyElements(param, param_copy, n);
  }
  double SumSquares(int64_t n, const float* x) override { return cpu::SumSquares(pool_, n, x); }

  absl::Status EncodeValues(const compression::StageSpec& spec, uint64_t seed, ConstTypedPtr values,
                            int64_t n, std::vector<uint8_t>* payload) override {
    STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<compression::CodecStage> stage, ValueStage(spec));
    F32In floats(values, n);
    compression::EncodeContext context;
    context.element_count = static_cast<uint64_t>(n);
    context.seed = seed;
    compression::ByteBuffer out;
    STRAIT_RETURN_IF_ERROR(stage->Encode(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(floats.get()), sizeof(float) * n),
        context, &out));
    payload->assign(out.data(), out.data() + out.size());
    return absl::OkStatus();
  }
  absl::Status DecodeValues(const compression::StageSpec& spec, absl::Span<const uint8_t> payload,
                            int64_t n, TypedPtr values) override {
    STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<compression::CodecStage> stage, ValueStage(spec));
    STRAIT_RETURN_IF_ERROR(stage->CheckSizes(sizeof(float) * n, payload.size()));
    F32Out floats(values, n, false);
    STRAIT_RETURN_IF_ERROR(stage->Decode(
        payload, absl::MakeSpan(reinterpret_cast<uint8_t*>(floats.get()), sizeof(float) * n)));
    floats.Commit();
    return absl::OkStatus();
  }

 private:
  // A product operand as floats: widened, and under bf16 precision rounded to bf16 (a tensor
  // core's input; exact for a bf16 tensor). A product of two bf16 values is exact in f32, so the
  // f32 product of these is what a tensor core computes, up to the order of the sums.
  class F32Operand {
   public:
    F32Operand(CpuBackend& backend, ConstTypedPtr x, int64_t n) : in_(x, n), p_(in_.get()) {
      if (!backend.bf16_ || !x.is_f32()) return;
      rounded_.assign(p_, p_ + n);
      cpu::RoundToBf16InPlace(backend.pool_, n, rounded_.data());
      p_ = rounded_.data();
    }
    const float* get() const { return p_; }

   private:
    F32In in_;
    std::vector<float> rounded_;
    const float* p_;
  };

  // The epilogue on the f32 result t [m, n] (ld ldc), in place (GemmEpilogue's contract; the bias
  // gradient is the caller's): per row, one branch-free loop per step, so that each vectorises as
  // BiasActivation's loops do. `bf16_c`: the bias is rounded to bf16 first.
  void ApplyEpilogue(int m, int n, int ldc, const GemmEpilogue& e, bool bf16_c, float* t) {
    const int64_t span = MatrixSpan(m, n, ldc);
    F32In input(e.act_input, e.act_input ? span : 0);
    F32Out pre(e.pre, e.pre ? span : 0, e.pre && span != int64_t{m} * n);
    const float* in = input.get();
    std::vector<float> rounded_bias;
    const float* bias = e.bias;
    if (bias != nullptr && bf16_c) {
      rounded_bias.resize(n);
      for (int c = 0; c < n; ++c) rounded_bias[c] = RoundToBf16(bias[c]);
      bias = rounded_bias.data();
    }
    pool_.ParallelFor(m, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* row = t + r * ldc;
        if (bias != nullptr) {
          for (int c = 0; c < n; ++c) row[c] += bias[c];
        }
        if (e.pre) std::memcpy(pre.get() + r * ldc, row, sizeof(float) * n);
        if (e.act == ActivationOp::kRelu) {
          for (int c = 0; c < n; ++c) row[c] = row[c] > 0.0f ? row[c] : 0.0f;
        } else if (e.act == ActivationOp::kGelu) {
          for (int c = 0; c < n; ++c) row[c] = Gelu(row[c]);
        }
        const float* x = in + r * ldc;
        if (e.grad_of == ActivationOp::kRelu) {
          for (int c = 0; c < n; ++c) row[c] = x[c] > 0.0f ? row[c] : 0.0f;
        } else if (e.grad_of == ActivationOp::kGelu) {
          for (int c = 0; c < n; ++c) row[c] = row[c] * GeluGrad(x[c]);
        }
      }
    });
    if (e.pre) pre.Commit();
  }

  // Head-major f32 copies [n, heads, tokens, dh] of the parts of `x` (rows of width ld, part i
  // at column i * width).
  void Gather(const AttentionDims& d, ConstTypedPtr x, int64_t ld,
              std::initializer_list<float*> parts) {
    int i = 0;
    for (float* part : parts) {
      HeadsToBatch(d.n, d.tokens, d.heads, d.dh, x + i++ * d.width(), ld, part);
    }
  }
  void Scatter(const AttentionDims& d, std::initializer_list<const float*> parts, TypedPtr x,
               int64_t ld) {
    int i = 0;
    for (const float* part : parts) {
      BatchToHeads(d.n, d.tokens, d.heads, d.dh, part, x + i++ * d.width(), ld);
    }
  }

  // The CPU stage of a value stage a backend may run (not top-k: its residuals are the host's).
  static absl::StatusOr<std::unique_ptr<compression::CodecStage>> ValueStage(
      const compression::StageSpec& spec) {
    if (!compression::IsValueStage(spec.kind) || spec.kind == compression::StageKind::kTopK) {
      return absl::UnimplementedError(
          "a backend runs the value stages none, fp16, bf16, int8 and int4, not this one");
    }
    return compression::MakeCodecStage(spec);
  }

  static void Copy(void* dst, const void* src, size_t bytes) {
    if (bytes > 0) std::memmove(dst, src, bytes);
  }

  int threads_;
  bool bf16_;  // training.precision: bf16.
  bool fused_attention_;
  ThreadPool pool_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(int threads, Precision precision,
                                                          AttentionKernel attention) {
  if (threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the CPU backend needs at least 1 thread, got ", threads));
  }
  return std::make_unique<CpuBackend>(threads, precision, attention);
}

}  // namespace strait::site
