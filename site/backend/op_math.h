// Scalar formulas shared by every backend, so that all of them compute the same function.
// Header-only; usable from CUDA kernels.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "site/backend/counter_rng.h"

namespace strait::site {

inline constexpr float kLayerNormEps = 1e-5f;

// One row of LayerNorm on the host: y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var +
// eps), the sums in order, so the CPU backend's loops and the key/value-cached decoder
// (site/nn/kv_decoder.h) compute the same bits.
inline void LayerNormRow(const float* x, const float* gamma, const float* beta, int dim, float* y,
                         float* mean, float* rstd) {
  float sum = 0.0f;
  for (int c = 0; c < dim; ++c) sum += x[c];
  const float mu = sum / dim;
  float var = 0.0f;
  for (int c = 0; c < dim; ++c) var += (x[c] - mu) * (x[c] - mu);
  const float rs = 1.0f / sqrtf(var / dim + kLayerNormEps);
  for (int c = 0; c < dim; ++c) y[c] = (x[c] - mu) * rs * gamma[c] + beta[c];
  *mean = mu;
  *rstd = rs;
}

// One row of RMSNorm on the host: y = x * rstd * gamma, rstd = 1 / sqrt(mean(x^2) + eps), the sum
// in order (the CPU backend's loop and the key/value-cached decoder).
inline float RmsNormRow(const float* x, const float* gamma, int dim, float eps, float* y) {
  float sum = 0.0f;
  for (int c = 0; c < dim; ++c) sum += x[c] * x[c];
  const float rs = 1.0f / sqrtf(sum / dim + eps);
  for (int c = 0; c < dim; ++c) y[c] = x[c] * rs * gamma[c];
  return rs;
}

// tanh(u) as a rational function of u^2 (degree 11 / 6, fitted for least relative error on
// [0, 9]), with u clamped to +-9 where tanh rounds to +-1 in float. Only multiplies, adds, one
// divide and compares, so the CPU loops that call it vectorize (a libm expf call per element did
// not); absolute error < 4e-7, which is all GELU needs (it adds the result to 1).
STRAIT_HOST_DEVICE inline float FastTanh(float u) {
  u = u < -9.0f ? -9.0f : (u > 9.0f ? 9.0f : u);
  const float s = u * u;
  const float p =
      ((((1.825520984e-11f * s - 1.278040074e-08f) * s + 9.267402675e-06f) * s + 2.920759609e-03f) *
           s +
       1.291922629e-01f) *
          s +
      9.999999404e-01f;
  const float q = ((2.280999033e-04f * s + 2.376315929e-02f) * s + 4.625250995e-01f) * s + 1.0f;
  const float t = u * p / q;
  return t < -1.0f ? -1.0f : (t > 1.0f ? 1.0f : t);
}

// x rounded to the nearest bfloat16 (ties to even), held in a float: what a tensor core multiplies
// (training.precision: bf16). NaN stays NaN; beyond bf16's largest value it rounds to infinity.
STRAIT_HOST_DEVICE inline float RoundToBf16(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  bits = (bits & 0x7fffffffu) > 0x7f800000u ? bits : rounded;
  float y;
  memcpy(&y, &bits, sizeof y);
  return y;
}

// Keys per step of the fused attention's online softmax (Backend::FusedAttentionForward): every
// backend rescales its running sums after the same keys, so that under bf16 the probabilities it
// rounds are the same ones.
inline constexpr int kFusedAttentionKeyTile = 32;

// Floats that `batch` row-major matrices of [rows, cols] with leading dimension `ld`, each
// `stride` after the previous, span from the first: what a matrix product reads of an operand.
STRAIT_HOST_DEVICE inline int64_t MatrixSpan(int rows, int cols, int ld, int64_t stride = 0,
                                             int batch = 1) {
  if (rows <= 0 || cols <= 0 || batch <= 0) return 0;
  return (batch - 1) * stride + int64_t{rows - 1} * ld + cols;
}

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
STRAIT_HOST_DEVICE inline float Gelu(float x) {
  const float kC = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + FastTanh(kC * (x + 0.044715f * x * x * x)));
}

STRAIT_HOST_DEVICE inline float GeluGrad(float x) {
  const float kC = 0.7978845608028654f;
  float t = FastTanh(kC * (x + 0.044715f * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kC * (1.0f + 3.0f * 0.044715f * x * x);
}

// SiLU (LLaMA's SwiGLU gate): x sigmoid(x), and its derivative.
STRAIT_HOST_DEVICE inline float Silu(float x) { return x / (1.0f + expf(-x)); }
STRAIT_HOST_DEVICE inline float SiluGrad(float x) {
  const float s = 1.0f / (1.0f + expf(-x));
  return s * (1.0f + x * (1.0f - s));
}

// Rotary positions: the angle by which pair i (columns 2i, 2i+1) of a head of width dh turns at
// position t, t * theta^(-2i/dh), in double so that every backend turns by the same float cos and
// sin (the angle reaches thousands of radians at long contexts).
STRAIT_HOST_DEVICE inline void RotaryCosSin(int64_t t, int i, int dh, double theta, float* c,
                                            float* s) {
  const double angle = static_cast<double>(t) * pow(theta, -2.0 * i / dh);
  *c = static_cast<float>(cos(angle));
  *s = static_cast<float>(sin(angle));
}

// Dropout's multiplier for element i: 0 (dropped, probability p) or 1 / (1 - p).
STRAIT_HOST_DEVICE inline float DropoutScale(float p, uint64_t key, uint64_t i) {
  return CounterUniform(key, i) >= p ? 1.0f / (1.0f - p) : 0.0f;
}

// The token id a float holds, or -1 when it is outside [0, vocab) (or NaN).
STRAIT_HOST_DEVICE inline int64_t TokenId(float id, int vocab) {
  return id >= 0.0f && id < static_cast<float>(vocab) ? static_cast<int64_t>(id) : -1;
}

}  // namespace strait::site
