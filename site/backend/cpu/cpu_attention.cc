#include "site/backend/cpu/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "site/backend/op_math.h"

namespace strait::site {
namespace {

constexpr int kTile = kFusedAttentionKeyTile;
constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

// x, or a copy of its n floats rounded to bf16 in `out`.
const float* Operand(const float* x, int64_t n, bool bf16, std::vector<float>& out) {
  if (!bf16) return x;
  out.resize(n);
  for (int64_t i = 0; i < n; ++i) out[i] = RoundToBf16(x[i]);
  return out.data();
}

float Rounded(float x, bool bf16) { return bf16 ? RoundToBf16(x) : x; }

// In the CUDA kernels' order: two threads each sum every other group of four columns, then add.
float Dot(const float* a, const float* b, int dh) {
  float half[2] = {0.0f, 0.0f};
  for (int c = 0; c < dh; c += 4) {
    half[(c / 4) % 2] +=
        a[c] * b[c] + a[c + 1] * b[c + 1] + a[c + 2] * b[c + 2] + a[c + 3] * b[c + 3];
  }
  return half[0] + half[1];
}

void Axpy(float a, const float* x, int dh, float* y) {
  for (int c = 0; c < dh; ++c) y[c] += a * x[c];
}

int64_t Grain(int tokens, int dh) {
  return std::max<int64_t>(1, (int64_t{1} << 20) / (int64_t{tokens} * dh));
}

}  // namespace

void CpuFusedAttentionForward(ThreadPool& pool, int batch, int tokens, int dh, float scale,
                              bool causal, bool bf16, const float* q, const float* k,
                              const float* v, float* o, float* lse) {
  const int64_t n = int64_t{batch} * tokens * dh;
  std::vector<float> rq, rk, rv;
  q = Operand(q, n, bf16, rq), k = Operand(k, n, bf16, rk), v = Operand(v, n, bf16, rv);
  pool.ParallelFor(int64_t{batch} * tokens, Grain(tokens, dh), [&](int64_t begin, int64_t end) {
    float s[kTile];
    for (int64_t r = begin; r < end; ++r) {
      const int64_t base = r / tokens * tokens * dh;
      const int i = static_cast<int>(r % tokens);
      const int keys = causal ? i + 1 : tokens;
      float* out = o + r * dh;
      std::fill(out, out + dh, 0.0f);
      float m = kMinusInfinity, l = 0.0f;
      for (int j0 = 0; j0 < keys; j0 += kTile) {
        float tile_max = kMinusInfinity;
        for (int t = 0; t < kTile; ++t) {
          s[t] = j0 + t < keys ? scale * Dot(q + r * dh, k + base + int64_t{j0 + t} * dh, dh)
                               : kMinusInfinity;
          tile_max = std::max(tile_max, s[t]);
        }
        const float m_new = std::max(m, tile_max);
        const float correction = std::exp(m - m_new);
        l *= correction;
        for (int c = 0; c < dh; ++c) out[c] *= correction;
        for (int t = 0; t < kTile && j0 + t < keys; ++t) {
          const float p = std::exp(s[t] - m_new);
          l += p;
          Axpy(Rounded(p, bf16), v + base + int64_t{j0 + t} * dh, dh, out);
        }
        m = m_new;
      }
      const float inv = 1.0f / l;
      for (int c = 0; c < dh; ++c) out[c] *= inv;
      lse[r] = m + std::log(l);
    }
  });
}

void CpuFusedAttentionBackward(ThreadPool& pool, int batch, int tokens, int dh, float scale,
                               bool causal, bool bf16, const float* q, const float* k,
                               const float* v, const float* o, const float* lse, const float* d_o,
                               float* delta, float* dq, float* dk, float* dv) {
  const int64_t rows = int64_t{batch} * tokens, n = rows * dh;
  for (int64_t r = 0; r < rows; ++r) {
    float d = 0.0f;
    for (int c = 0; c < dh; ++c) d += d_o[r * dh + c] * o[r * dh + c];
    delta[r] = d;
  }
  std::vector<float> rq, rk, rv, rg;
  q = Operand(q, n, bf16, rq), k = Operand(k, n, bf16, rk), v = Operand(v, n, bf16, rv);
  const float* g = Operand(d_o, n, bf16, rg);
  // One pass per query (dq), then one per key (dk, dv): no two rows write the same output.
  pool.ParallelFor(rows, Grain(tokens, dh), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t head = r / tokens, base = head * tokens * dh;
      const int i = static_cast<int>(r % tokens);
      float* out = dq + r * dh;
      std::fill(out, out + dh, 0.0f);
      for (int j = 0; j < (causal ? i + 1 : tokens); ++j) {
        const float* kj = k + base + int64_t{j} * dh;
        const float s = scale * Dot(q + r * dh, kj, dh);
        const float dp = Dot(g + r * dh, v + base + int64_t{j} * dh, dh);
        const float p = std::exp(s - lse[r]);
        Axpy(Rounded(scale * p * (dp - delta[r]), bf16), kj, dh, out);
      }
    }
  });
  pool.ParallelFor(rows, Grain(tokens, dh), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t head = r / tokens;
      const int j = static_cast<int>(r % tokens);
      float* dk_row = dk + r * dh;
      float* dv_row = dv + r * dh;
      std::fill(dk_row, dk_row + dh, 0.0f);
      std::fill(dv_row, dv_row + dh, 0.0f);
      for (int i = causal ? j : 0; i < tokens; ++i) {
        const int64_t qi = head * tokens + i;
        const float s = scale * Dot(k + r * dh, q + qi * dh, dh);
        const float dp = Dot(v + r * dh, g + qi * dh, dh);
        const float p = std::exp(s - lse[qi]);
        Axpy(Rounded(p, bf16), g + qi * dh, dh, dv_row);
        Axpy(Rounded(scale * p * (dp - delta[qi]), bf16), q + qi * dh, dh, dk_row);
      }
    }
  });
}

}  // namespace strait::site
