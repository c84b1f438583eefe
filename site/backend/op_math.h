// Scalar formulas shared by every backend, so that all of them compute the same function.
// Header-only; usable from CUDA kernels.
#pragma once

#include <math.h>

#include "site/backend/counter_rng.h"

namespace strait::site {

inline constexpr float kLayerNormEps = 1e-5f;

// tanh(u) = 1 - 2 / (exp(2u) + 1): one expf (glibc's tanhf is several times slower), exact limits
// at +-inf, absolute error ~1e-7, which is all GELU needs (it adds the result to 1).
STRAIT_HOST_DEVICE inline float FastTanh(float u) { return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f); }

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

// Dropout's multiplier for element i: 0 (dropped, probability p) or 1 / (1 - p).
STRAIT_HOST_DEVICE inline float DropoutScale(float p, uint64_t key, uint64_t i) {
  return CounterUniform(key, i) >= p ? 1.0f / (1.0f - p) : 0.0f;
}

// The token id a float holds, or -1 when it is outside [0, vocab) (or NaN).
STRAIT_HOST_DEVICE inline int64_t TokenId(float id, int vocab) {
  return id >= 0.0f && id < static_cast<float>(vocab) ? static_cast<int64_t>(id) : -1;
}

}  // namespace strait::site
