#include "site/backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "site/backend/cpu/cpu_attention.h"
#include "site/backend/cpu/thread_pool.h"
#include "site/backend/op_math.h"

namespace strait::site {
namespace {

// Below this many floats of work a loop runs on the calling thread: waking the pool costs more.
constexpr int64_t kGrainFloats = 1 << 15;

int64_t RowGrain(int64_t cols) {
  return std::max<int64_t>(1, kGrainFloats / std::max<int64_t>(1, cols));
}

// Small matrix products (attention) where a BLAS call costs more than the arithmetic:
// C = alpha * op(A) op(B) + beta * C. op(B) is first packed row-major [k, n] so that the inner loop
// runs over contiguous columns (vectorised); the sum over l is in order.
void SmallGemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
               const float* b, int ldb, float beta, float* c, int ldc) {
  thread_local std::vector<float> packed, row;
  packed.resize(static_cast<size_t>(k) * n);
  row.resize(n);
  for (int l = 0; l < k; ++l) {
    for (int j = 0; j < n; ++j) {
      packed[static_cast<size_t>(l) * n + j] =
          tb ? b[int64_t{j} * ldb + l] : b[int64_t{l} * ldb + j];
    }
  }
  const int64_t a_i = ta ? 1 : lda, a_l = ta ? lda : 1;
  for (int i = 0; i < m; ++i) {
    float* r = row.data();
    std::fill(r, r + n, 0.0f);
    for (int l = 0; l < k; ++l) {
      const float av = a[i * a_i + l * a_l];
      const float* bl = packed.data() + static_cast<size_t>(l) * n;
      for (int j = 0; j < n; ++j) r[j] += av * bl[j];
    }
    float* ci = c + int64_t{i} * ldc;
    for (int j = 0; j < n; ++j) ci[j] = alpha * r[j] + (beta == 0.0f ? 0.0f : beta * ci[j]);
  }
}

void Sgemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, alpha, a, lda, b, ldb, beta, c, ldc);
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

  std::string Name() const override {
    return absl::StrCat("cpu (", threads_, " threads", bf16_ ? ", bf16 products" : "", ")");
  }

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
  void Fill(float* x, int64_t n, float value) override { std::fill(x, x + n, value); }
  absl::Status Sync() override { return absl::OkStatus(); }

  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) override {
    if (m == 0 || n == 0) return;
    if (bf16_) {
      a = RoundedToBf16(a, MatrixSpan(ta ? k : m, ta ? m : k, lda), bf16_a_);
      b = RoundedToBf16(b, MatrixSpan(tb ? n : k, tb ? k : n, ldb), bf16_b_);
    }
    // Split the larger of C's dimensions over the pool; each part is one single-threaded sgemm
    // over the whole k, so the parts (and the result) depend only on the thread count.
    const int64_t grain = std::max<int64_t>(
        16, (int64_t{1} << 20) / std::max<int64_t>(1, int64_t{std::min(m, n)} * k));
    if (m >= n) {
      pool_.ParallelFor(m, grain, [&](int64_t begin, int64_t end) {
        Sgemm(ta, tb, static_cast<int>(end - begin), n, k, alpha, a + begin * (ta ? 1 : lda), lda,
              b, ldb, beta, c + begin * ldc, ldc);
      });
    } else {
      pool_.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
        Sgemm(ta, tb, m, static_cast<int>(end - begin), k, alpha, a, lda,
              b + begin * (tb ? ldb : 1), ldb, beta, c + begin, ldc);
      });
    }
  }

  void GemmBatched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                   int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta,
                   float* c, int ldc, int64_t stride_c, int batch) override {
    if (bf16_) {
      a = RoundedToBf16(a, MatrixSpan(ta ? k : m, ta ? m : k, lda, stride_a, batch), bf16_a_);
      b = RoundedToBf16(b, MatrixSpan(tb ? n : k, tb ? k : n, ldb, stride_b, batch), bf16_b_);
    }
    const bool small = int64_t{m} * n * k < 64 * 64 * 64;
    const int64_t grain = std::max<int64_t>(1, kGrainFloats / std::max(1, m * n * k / 8));
    pool_.ParallelFor(batch, grain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        (small ? SmallGemm : Sgemm)(ta, tb, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b,
                                    ldb, beta, c + i * stride_c, ldc);
      }
    });
  }

  void BiasActivation(int64_t rows, int cols, const float* bias, ActivationOp act, float* x,
                      float* y) override {
    pool_.ParallelFor(rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        float* xr = x + r * cols;
        float* yr = y + r * cols;
        if (bias != nullptr) {
          for (int c = 0; c < cols; ++c) xr[c] += bias[c];
        }
        switch (act) {
          case ActivationOp::kNone:
            if (yr != xr) std::memcpy(yr, xr, sizeof(float) * cols);
            break;
          case ActivationOp::kRelu:
            for (int c = 0; c < cols; ++c) yr[c] = xr[c] > 0.0f ? xr[c] : 0.0f;
            break;
          case ActivationOp::kGelu:
            for (int c = 0; c < cols; ++c) yr[c] = Gelu(xr[c]);
            break;
        }
      }
    });
  }

  void ActivationBackward(int64_t n, ActivationOp act, const float* x, const float* dy,
                          float* dx) override {
    pool_.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
      switch (act) {
        case ActivationOp::kNone:
          if (dx != dy) std::memcpy(dx + begin, dy + begin, sizeof(float) * (end - begin));
          break;
        case ActivationOp::kRelu:
          for (int64_t i = begin; i < end; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
          break;
        case ActivationOp::kGelu:
          for (int64_t i = begin; i < end; ++i) dx[i] = dy[i] * GeluGrad(x[i]);
          break;
      }
    });
  }

  void ColumnSum(int64_t rows, int cols, const float* x, int64_t ldx, float beta,
                 float* out) override {
    // Column blocks in parallel; within a column the rows are summed in order.
    const int64_t blocks = (cols + 255) / 256;
    pool_.ParallelFor(blocks, std::max<int64_t>(1, kGrainFloats / std::max<int64_t>(1, rows * 256)),
                      [&](int64_t begin, int64_t end) {
                        float acc[256];
                        for (int64_t blk = begin; blk < end; ++blk) {
                          const int c0 = static_cast<int>(blk * 256);
                          const int cn = std::min(256, cols - c0);
                          std::fill(acc, acc + cn, 0.0f);
                          for (int64_t r = 0; r < rows; ++r) {
                            const float* xr = x + r * ldx + c0;
                            for (int c = 0; c < cn; ++c) acc[c] += xr[c];
                          }
                          for (int c = 0; c < cn; ++c) {
                            out[c0 + c] = (beta == 0.0f ? 0.0f : beta * out[c0 + c]) + acc[c];
                          }
                        }
                      });
  }

  void LayerNormForward(int64_t rows, int dim, const float* x, const float* gamma,
                        const float* beta, float* y, float* mean, float* rstd) override {
    pool_.ParallelFor(rows, RowGrain(dim), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* xr = x + r * dim;
        float sum = 0.0f;
        for (int c = 0; c < dim; ++c) sum += xr[c];
        const float mu = sum / dim;
        float var = 0.0f;
        for (int c = 0; c < dim; ++c) var += (xr[c] - mu) * (xr[c] - mu);
        const float rs = 1.0f / std::sqrt(var / dim + kLayerNormEps);
        float* yr = y + r * dim;
        for (int c = 0; c < dim; ++c) yr[c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
        mean[r] = mu;
        rstd[r] = rs;
      }
    });
  }

  void LayerNormBackward(int64_t rows, int dim, const float* x, const float* gamma,
                         const float* mean, const float* rstd, const float* dy, float* dx,
                         float* dgamma, float* dbeta) override {
    pool_.ParallelFor(rows, RowGrain(dim), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* xr = x + r * dim;
        const float* dyr = dy + r * dim;
        const float mu = mean[r], rs = rstd[r];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < dim; ++c) {
          const float dnorm = dyr[c] * gamma[c];
          dnorm_mean += dnorm;
          dnorm_norm_mean += dnorm * (xr[c] - mu) * rs;
        }
        dnorm_mean /= dim;
        dnorm_norm_mean /= dim;
        float* dxr = dx + r * dim;
        for (int c = 0; c < dim; ++c) {
          const float norm = (xr[c] - mu) * rs;
          dxr[c] += (dyr[c] * gamma[c] - dnorm_mean - norm * dnorm_norm_mean) * rs;
        }
      }
    });
    // Parameter gradients: rows summed in order, so the result does not depend on the threads.
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * dim;
      const float* dyr = dy + r * dim;
      const float mu = mean[r], rs = rstd[r];
      for (int c = 0; c < dim; ++c) {
        dgamma[c] += (xr[c] - mu) * rs * dyr[c];
        dbeta[c] += dyr[c];
      }
    }
  }

  bool FusedAttention(int dh) const override { return fused_attention_ && FusedAttentionTakes(dh); }
  void FusedAttentionForward(int batch, int tokens, int dh, float scale, bool causal,
                             const float* q, const float* k, const float* v, float* o,
                             float* lse) override {
    CpuFusedAttentionForward(pool_, batch, tokens, dh, scale, causal, bf16_, q, k, v, o, lse);
  }
  void FusedAttentionBackward(int batch, int tokens, int dh, float scale, bool causal,
                              const float* q, const float* k, const float* v, const float* o,
                              const float* lse, const float* d_o, float* delta, float* dq,
                              float* dk, float* dv) override {
    CpuFusedAttentionBackward(pool_, batch, tokens, dh, scale, causal, bf16_, q, k, v, o, lse, d_o,
                              delta, dq, dk, dv);
  }

  void SoftmaxRows(int64_t rows, int cols, float scale, bool causal, const float* x,
                   float* y) override {
    pool_.ParallelFor(rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        const int valid = causal ? static_cast<int>(r % cols) + 1 : cols;
        float mx = -std::numeric_limits<float>::infinity();
        for (int c = 0; c < valid; ++c) mx = std::max(mx, scale * xr[c]);
        float sum = 0.0f;
        for (int c = 0; c < valid; ++c) {
          yr[c] = std::exp(scale * xr[c] - mx);
          sum += yr[c];
        }
        const float inv = 1.0f / sum;
        for (int c = 0; c < valid; ++c) yr[c] *= inv;
        std::fill(yr + valid, yr + cols, 0.0f);
      }
    });
  }

  void SoftmaxRowsBackward(int64_t rows, int cols, float scale, const float* y, const float* dy,
                           float* dx) override {
    pool_.ParallelFor(rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* yr = y + r * cols;
        const float* dyr = dy + r * cols;
        float* dxr = dx + r * cols;
        float dot = 0.0f;
        for (int c = 0; c < cols; ++c) dot += dyr[c] * yr[c];
        for (int c = 0; c < cols; ++c) dxr[c] = scale * yr[c] * (dyr[c] - dot);
      }
    });
  }

  void CrossEntropy(int64_t rows, int classes, const float* logits, const int32_t* labels,
                    float grad_scale, float* loss, int32_t* correct, float* dlogits) override {
    for (int64_t r = 0; r < rows; ++r) {
      const float* lr = logits + r * classes;
      float* dr = dlogits + r * classes;
      const int32_t label = labels[r];
      if (label < 0 || label >= classes) {
        loss[r] = 0.0f;
        correct[r] = 0;
        std::fill(dr, dr + classes, 0.0f);
        continue;
      }
      int argmax = 0;
      for (int c = 1; c < classes; ++c) {
        if (lr[c] > lr[argmax]) argmax = c;
      }
      const float mx = lr[argmax];
      float sum = 0.0f;
      for (int c = 0; c < classes; ++c) {  // dr holds the exponentials until they are scaled.
        dr[c] = std::exp(lr[c] - mx);
        sum += dr[c];
      }
      loss[r] = std::log(sum) + mx - lr[label];
      correct[r] = argmax == label ? 1 : 0;
      const float inv = 1.0f / sum;
      for (int c = 0; c < classes; ++c)
        dr[c] = (dr[c] * inv - (c == label ? 1.0f : 0.0f)) * grad_scale;
    }
  }

  void Dropout(int64_t n, float p, uint64_t key, int64_t offset, const float* x,
               float* y) override {
    pool_.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = x[i] * DropoutScale(p, key, offset + i);
    });
  }

  void Axpy(int64_t n, float alpha, const float* x, float* y) override {
    pool_.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] += alpha * x[i];
    });
  }

  void Axpby(int64_t n, float alpha, const float* x, float beta, float* y) override {
    pool_.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float ax = alpha * x[i], by = beta * y[i];
        y[i] = ax + by;
      }
    });
  }

  void Copy2D(int64_t rows, int cols, const float* src, int64_t ld_src, float* dst,
              int64_t ld_dst) override {
    for (int64_t r = 0; r < rows; ++r) {
      std::memmove(dst + r * ld_dst, src + r * ld_src, sizeof(float) * cols);
    }
  }

  void EmbeddingLookup(int64_t rows, int dim, int vocab, const float* ids, const float* table,
                       float* y) override {
    pool_.ParallelFor(rows, RowGrain(dim), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t id = TokenId(ids[r], vocab);
        float* yr = y + r * dim;
        if (id < 0) {
          std::fill(yr, yr + dim, 0.0f);
        } else {
          std::memcpy(yr, table + id * dim, sizeof(float) * dim);
        }
      }
    });
  }

  void EmbeddingBackward(int64_t rows, int dim, int vocab, const float* ids, const float* dy,
                         float* dtable) override {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t id = TokenId(ids[r], vocab);
      if (id < 0) continue;
      float* dr = dtable + id * dim;
      const float* dyr = dy + r * dim;
      for (int c = 0; c < dim; ++c) dr[c] += dyr[c];
    }
  }

  void ExtractPatches(int n, int channels, int height, int width, int p, const float* images,
                      float* patches) override {
    const int gh = height / p, gw = width / p;
    const int64_t patch_size = int64_t{channels} * p * p;
    for (int b = 0; b < n; ++b) {
      const float* img = images + int64_t{b} * channels * height * width;
      for (int py = 0; py < gh; ++py) {
        for (int px = 0; px < gw; ++px) {
          float* out = patches + (int64_t{b} * gh * gw + py * gw + px) * patch_size;
          for (int c = 0; c < channels; ++c) {
            for (int i = 0; i < p; ++i) {
              const float* src = img + (int64_t{c} * height + py * p + i) * width + px * p;
              std::memcpy(out + (c * p + i) * p, src, sizeof(float) * p);
            }
          }
        }
      }
    }
  }

  void HeadsToBatch(int n, int tokens, int heads, int dh, const float* x, int64_t ldx,
                    float* y) override {
    for (int b = 0; b < n; ++b) {
      for (int h = 0; h < heads; ++h) {
        for (int t = 0; t < tokens; ++t) {
          std::memcpy(y + ((int64_t{b} * heads + h) * tokens + t) * dh,
                      x + (int64_t{b} * tokens + t) * ldx + h * dh, sizeof(float) * dh);
        }
      }
    }
  }

  void BatchToHeads(int n, int tokens, int heads, int dh, const float* y, float* x,
                    int64_t ldx) override {
    for (int b = 0; b < n; ++b) {
      for (int h = 0; h < heads; ++h) {
        for (int t = 0; t < tokens; ++t) {
          std::memcpy(x + (int64_t{b} * tokens + t) * ldx + h * dh,
                      y + ((int64_t{b} * heads + h) * tokens + t) * dh, sizeof(float) * dh);
        }
      }
    }
  }

  void SgdUpdate(int64_t n, float lr, float momentum, float weight_decay, float grad_scale,
                 float* param, const float* grad, float* velocity) override {
    pool_.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float g = grad[i] * grad_scale + weight_decay * param[i];
        velocity[i] = momentum * velocity[i] + g;
        param[i] -= lr * velocity[i];
      }
    });
  }

  void AdamWUpdate(int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                   float bias1, float bias2, float grad_scale, float* param, const float* grad,
                   float* m, float* v) override {
    pool_.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float g = grad[i] * grad_scale;
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        const float update = (m[i] / bias1) / (std::sqrt(v[i] / bias2) + eps);
        param[i] -= lr * (update + weight_decay * param[i]);
      }
    });
  }

  double SumSquares(int64_t n, const float* x) override {
    // A fixed number of chunks (not one per thread) summed in order: thread-count independent.
    constexpr int kChunks = 64;
    double partial[kChunks] = {};
    pool_.ParallelFor(kChunks, n >= kGrainFloats * 4 ? 1 : kChunks,
                      [&](int64_t begin, int64_t end) {
                        for (int64_t c = begin; c < end; ++c) {
                          double s = 0.0;
                          for (int64_t i = n * c / kChunks; i < n * (c + 1) / kChunks; ++i) {
                            s += static_cast<double>(x[i]) * x[i];
                          }
                          partial[c] = s;
                        }
                      });
    double total = 0.0;
    for (double s : partial) total += s;
    return total;
  }

 private:
  static void Copy(void* dst, const void* src, size_t bytes) {
    if (bytes > 0) std::memmove(dst, src, bytes);
  }

  // The `n` floats from x rounded to bf16 into `out`: a product of them in fp32 is exactly what a
  // tensor core computes with bf16 inputs (every product of two bf16 is exact in fp32), up to the
  // order of the sums.
  const float* RoundedToBf16(const float* x, int64_t n, std::vector<float>& out) {
    out.resize(n);
    float* y = out.data();
    pool_.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = RoundToBf16(x[i]);
    });
    return y;
  }

  int threads_;
  bool bf16_;  // training.precision: bf16.
  bool fused_attention_;
  std::vector<float> bf16_a_, bf16_b_;
  ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend(int threads, Precision precision,
                                          AttentionKernel attention) {
  return std::make_unique<CpuBackend>(std::max(1, threads), precision, attention);
}

}  // namespace strait::site
