#include "site/backend/cpu/cpu_loops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "site/backend/op_math.h"

namespace strait::site::cpu {
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

}  // namespace

void Gemm(ThreadPool& pool, bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  // Split the larger of C's dimensions over the pool; each part is one single-threaded sgemm
  // over the whole k, so the parts (and the result) depend only on the thread count.
  const int64_t grain =
      std::max<int64_t>(16, (int64_t{1} << 20) / std::max<int64_t>(1, int64_t{std::min(m, n)} * k));
  if (m >= n) {
    pool.ParallelFor(m, grain, [&](int64_t begin, int64_t end) {
      Sgemm(ta, tb, static_cast<int>(end - begin), n, k, alpha, a + begin * (ta ? 1 : lda), lda, b,
            ldb, beta, c + begin * ldc, ldc);
    });
  } else {
    pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
      Sgemm(ta, tb, m, static_cast<int>(end - begin), k, alpha, a, lda, b + begin * (tb ? ldb : 1),
            ldb, beta, c + begin, ldc);
    });
  }
}

void GemmBatched(ThreadPool& pool, bool ta, bool tb, int m, int n, int k, float alpha,
                 const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                 int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c, int batch) {
  const bool small = int64_t{m} * n * k < 64 * 64 * 64;
  const int64_t grain = std::max<int64_t>(1, kGrainFloats / std::max(1, m * n * k / 8));
  pool.ParallelFor(batch, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      (small ? SmallGemm : Sgemm)(ta, tb, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b,
                                  ldb, beta, c + i * stride_c, ldc);
    }
  });
}

void RoundToBf16InPlace(ThreadPool& pool, int64_t n, float* x) {
  pool.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] = RoundToBf16(x[i]);
  });
}

void BiasActivation(ThreadPool& pool, int64_t rows, int cols, const float* bias, ActivationOp act,
                    float* x, float* y) {
  pool.ParallelFor(rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
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

void ActivationBackward(ThreadPool& pool, int64_t n, ActivationOp act, const float* x,
                        const float* dy, float* dx) {
  pool.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
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

void ColumnSum(ThreadPool& pool, int64_t rows, int cols, const float* x, int64_t ldx, float beta,
               float* out) {
  // Column blocks in parallel; within a column the rows are summed in order.
  const int64_t blocks = (cols + 255) / 256;
  pool.ParallelFor(blocks, std::max<int64_t>(1, kGrainFloats / std::max<int64_t>(1, rows * 256)),
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

void LayerNormForward(ThreadPool& pool, int64_t rows, int dim, const float* x, const float* gamma,
                      const float* beta, float* y, float* mean, float* rstd) {
  pool.ParallelFor(rows, RowGrain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      LayerNormRow(x + r * dim, gamma, beta, dim, y + r * dim, mean + r, rstd + r);
    }
  });
}

void LayerNormBackward(ThreadPool& pool, int64_t rows, int dim, const float* x, const float* gamma,
                       const float* mean, const float* rstd, const float* dy, float* dx,
                       float* dgamma, float* dbeta) {
  pool.ParallelFor(rows, RowGrain(dim), [&](int64_t begin, int64_t end) {
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

void SoftmaxRows(ThreadPool& pool, int64_t rows, int cols, float scale, bool causal, const float* x,
                 float* y) {
  pool.ParallelFor(rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
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

void SoftmaxRowsBackward(ThreadPool& pool, int64_t rows, int cols, float scale, const float* y,
                         const float* dy, float* dx) {
  pool.ParallelFor(rows, RowGrain(cols), [&](int64_t begin, int64_t end) {
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

void Dropout(ThreadPool& pool, int64_t n, float p, uint64_t key, int64_t offset, const float* x,
             float* y) {
  pool.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = x[i] * DropoutScale(p, key, offset + i);
  });
}

void Axpy(ThreadPool& pool, int64_t n, float alpha, const float* x, float* y) {
  pool.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] += alpha * x[i];
  });
}

void Axpby(ThreadPool& pool, int64_t n, float alpha, const float* x, float beta, float* y) {
  pool.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float ax = alpha * x[i], by = beta * y[i];
      y[i] = ax + by;
    }
  });
}

void EmbeddingBackward(int64_t rows, int dim, int vocab, const float* ids, const float* dy,
                       float* dtable) {
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t id = TokenId(ids[r], vocab);
    if (id < 0) continue;
    float* dr = dtable + id * dim;
    const float* dyr = dy + r * dim;
    for (int c = 0; c < dim; ++c) dr[c] += dyr[c];
  }
}

void SgdUpdate(ThreadPool& pool, int64_t n, float lr, float momentum, float weight_decay,
               float grad_scale, float* param, const float* grad, float* velocity) {
  pool.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float g = grad[i] * grad_scale + weight_decay * param[i];
      velocity[i] = momentum * velocity[i] + g;
      param[i] -= lr * velocity[i];
    }
  });
}

void AdamWUpdate(ThreadPool& pool, int64_t n, float lr, float beta1, float beta2, float eps,
                 float weight_decay, float bias1, float bias2, float grad_scale, float* param,
                 const float* grad, float* m, float* v) {
  pool.ParallelFor(n, kGrainFloats, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float g = grad[i] * grad_scale;
      m[i] = beta1 * m[i] + (1.0f - beta1) * g;
      v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
      const float update = (m[i] / bias1) / (std::sqrt(v[i] / bias2) + eps);
      param[i] -= lr * (update + weight_decay * param[i]);
    }
  });
}

double SumSquares(ThreadPool& pool, int64_t n, const float* x) {
  // A fixed number of chunks (not one per thread) summed in order: thread-count independent.
  constexpr int kChunks = 64;
  double partial[kChunks] = {};
  pool.ParallelFor(kChunks, n >= kGrainFloats * 4 ? 1 : kChunks, [&](int64_t begin, int64_t end) {
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

void ClassifierLoss(ThreadPool& pool, int64_t rows, int classes, float* logits,
                    const int32_t* labels, float grad_scale, float* loss, int32_t* correct) {
  pool.ParallelFor(rows, RowGrain(classes), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* lr = logits + r * classes;
      const int32_t label = labels[r];
      if (label < 0 || label >= classes) {
        loss[r] = 0.0f;
        correct[r] = 0;
        std::fill(lr, lr + classes, 0.0f);
        continue;
      }
      int argmax = 0;
      for (int c = 1; c < classes; ++c) {
        if (lr[c] > lr[argmax]) argmax = c;
      }
      const float mx = lr[argmax];
      float sum = 0.0f;
      for (int c = 0; c < classes; ++c) sum += std::exp(lr[c] - mx);
      loss[r] = std::log(sum) + mx - lr[label];
      correct[r] = argmax == label ? 1 : 0;
      const float inv = 1.0f / sum;
      for (int c = 0; c < classes; ++c) {
        lr[c] = (std::exp(lr[c] - mx) * inv - (c == label ? 1.0f : 0.0f)) * grad_scale;
      }
    }
  });
}

}  // namespace strait::site::cpu
