#include "site/backend/cpu/llama_loops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "site/backend/op_math.h"

namespace strait::site::cpu {
namespace {

// Rows per task: about 16 K floats of work.
int64_t Grain(int64_t cols) {
  return std::max<int64_t>(1, (16 << 10) / std::max<int64_t>(1, cols));
}

}  // namespace

void RmsNormForward(ThreadPool& pool, int64_t rows, int dim, float eps, const float* x,
                    const float* gamma, float* y, float* rstd) {
  pool.ParallelFor(rows, Grain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      rstd[r] = RmsNormRow(x + r * dim, gamma, dim, eps, y + r * dim);
    }
  });
}

// y = x r g with r = (mean(x^2) + eps)^(-1/2): dx = r g dy - x r^3 / dim * sum(dy g x).
void RmsNormBackward(ThreadPool& pool, int64_t rows, int dim, const float* x, const float* gamma,
                     const float* rstd, const float* dy, float* dx, float* dgamma) {
  pool.ParallelFor(rows, Grain(dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * dim;
      const float* dyr = dy + r * dim;
      const float rs = rstd[r];
      float dot = 0.0f;
      for (int c = 0; c < dim; ++c) dot += dyr[c] * gamma[c] * xr[c];
      const float k = dot * rs * rs * rs / dim;
      float* dxr = dx + r * dim;
      for (int c = 0; c < dim; ++c) dxr[c] += dyr[c] * gamma[c] * rs - xr[c] * k;
    }
  });
  for (int64_t r = 0; r < rows; ++r) {  // In row order: the same bits for any thread count.
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    for (int c = 0; c < dim; ++c) dgamma[c] += dyr[c] * xr[c] * rstd[r];
  }
}

void Rotary(ThreadPool& pool, int64_t rows, int tokens, int heads, int dh, double theta,
            bool inverse, float* x, int64_t ldx) {
  const int pairs = dh / 2;
  // The cos and sin of every (token, pair), computed once per call.
  std::vector<float> cs(static_cast<size_t>(tokens) * pairs * 2);
  for (int t = 0; t < tokens; ++t) {
    for (int i = 0; i < pairs; ++i) {
      const size_t at = (static_cast<size_t>(t) * pairs + i) * 2;
      RotaryCosSin(t, i, dh, theta, &cs[at], &cs[at + 1]);
    }
  }
  const float sign = inverse ? -1.0f : 1.0f;
  pool.ParallelFor(rows, Grain(int64_t{heads} * dh), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row_cs = &cs[static_cast<size_t>(r % tokens) * pairs * 2];
      for (int h = 0; h < heads; ++h) {
        float* v = x + r * ldx + int64_t{h} * dh;
        for (int i = 0; i < pairs; ++i) {
          const float c = row_cs[2 * i], s = sign * row_cs[2 * i + 1];
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * c - b * s;
          v[2 * i + 1] = a * s + b * c;
        }
      }
    }
  });
}

void SwiGluForward(ThreadPool& pool, int64_t rows, int f, const float* gate_up, float* y) {
  pool.ParallelFor(rows, Grain(f), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = gate_up + r * 2 * f;
      float* yr = y + r * f;
      for (int c = 0; c < f; ++c) yr[c] = Silu(g[c]) * g[f + c];
    }
  });
}

void SwiGluBackward(ThreadPool& pool, int64_t rows, int f, const float* gate_up, const float* dy,
                    float* dgate_up) {
  pool.ParallelFor(rows, Grain(f), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* g = gate_up + r * 2 * f;
      const float* dyr = dy + r * f;
      float* d = dgate_up + r * 2 * f;
      for (int c = 0; c < f; ++c) {
        d[c] = dyr[c] * g[f + c] * SiluGrad(g[c]);
        d[f + c] = dyr[c] * Silu(g[c]);
      }
    }
  });
}

void RepeatKvHeads(ThreadPool& pool, int64_t rows, int heads, int kv_heads, int dh,
                   const float* qkv, float* full) {
  const int64_t q = int64_t{heads} * dh, kv = int64_t{kv_heads} * dh, group = heads / kv_heads;
  pool.ParallelFor(rows, Grain(3 * q), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = qkv + r * (q + 2 * kv);
      float* out = full + r * 3 * q;
      std::copy_n(in, q, out);
      for (int part = 1; part <= 2; ++part) {  // keys, then values
        for (int h = 0; h < heads; ++h) {
          std::copy_n(in + q + (part - 1) * kv + (h / group) * dh, dh, out + part * q + h * dh);
        }
      }
    }
  });
}

void SumKvHeads(ThreadPool& pool, int64_t rows, int heads, int kv_heads, int dh, const float* dfull,
                float* dqkv) {
  const int64_t q = int64_t{heads} * dh, kv = int64_t{kv_heads} * dh, group = heads / kv_heads;
  pool.ParallelFor(rows, Grain(3 * q), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* in = dfull + r * 3 * q;
      float* out = dqkv + r * (q + 2 * kv);
      std::copy_n(in, q, out);
      for (int part = 1; part <= 2; ++part) {
        for (int g = 0; g < kv_heads; ++g) {
          float* o = out + q + (part - 1) * kv + g * dh;
          const float* first = in + part * q + g * group * dh;
          std::copy_n(first, dh, o);
          for (int k = 1; k < group; ++k) {
            for (int j = 0; j < dh; ++j) o[j] += first[k * dh + j];
          }
        }
      }
    }
  });
}

}  // namespace strait::site::cpu
