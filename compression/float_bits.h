// Scalar bit-level conversions shared by the CPU loops and the CUDA kernels, so that both produce
// the same bytes by construction. Branch-free so that the CPU loops auto-vectorise (SSE2 baseline).
// Every float operation here is a single correctly rounded IEEE operation (no a*b+c that a compiler
// could contract into an FMA), so the results do not depend on the device.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define STRAIT_HD __host__ __device__ __forceinline__
#else
#define STRAIT_HD inline
#endif

namespace strait::compression {

STRAIT_HD uint32_t FloatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

// Single correctly rounded operations; on the device they must not be contracted into an FMA.
STRAIT_HD float Mul(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

STRAIT_HD float Add(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

STRAIT_HD float BitsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// fp32 -> IEEE half, round to nearest even; overflow gives Inf; NaN stays NaN, quieted, with the
// top of its payload (what x86 F16C does, so either may be used). After F. Giesen's
// float_to_half_fast3_rtne, written with selects.
STRAIT_HD uint16_t FloatToHalfBits(float value) {
  uint32_t u = FloatBits(value);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  // |value| >= 65520 (rounds to Inf) or Inf/NaN.
  uint32_t special = a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu) : 0x7c00u;
  // Subnormal half: let an fp32 addition do the rounding at the right bit position.
  const float denorm_magic = BitsFloat(((127 - 15) + (23 - 10) + 1) << 23);
  uint32_t sub = FloatBits(BitsFloat(a) + denorm_magic) - FloatBits(denorm_magic);
  // Normal half: rebias the exponent and round to nearest even by hand.
  uint32_t normal = (a + (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + ((a >> 13) & 1u)) >> 13;
  uint32_t h = a >= (143u << 23) ? special : (a < (113u << 23) ? sub : normal);
  return static_cast<uint16_t>(h | sign);
}

// IEEE half -> fp32 (exact).
STRAIT_HD float HalfBitsToFloat(uint16_t h) {
  uint32_t em = static_cast<uint32_t>(h & 0x7fffu) << 13;
  uint32_t exp = em & (0x7c00u << 13);
  uint32_t normal = em + ((127u - 15u) << 23);
  uint32_t inf_nan = normal + ((128u - 16u) << 23);
  const float magic = BitsFloat(113u << 23);
  uint32_t sub = FloatBits(BitsFloat(normal + (1u << 23)) - magic);
  uint32_t o = exp == (0x7c00u << 13) ? inf_nan : (exp == 0 ? sub : normal);
  return BitsFloat(o | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

// fp32 -> bfloat16, round to nearest even; NaN stays NaN (quieted).
STRAIT_HD uint16_t FloatToBf16Bits(float value) {
  uint32_t u = FloatBits(value);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

STRAIT_HD float Bf16BitsToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

// |value| as ordered (non-negative) integer bits; 0 for Inf and NaN, which the quantizers keep out
// of the scale. Signed so that a max-reduction over it vectorises with SSE2.
STRAIT_HD int32_t FiniteAbsBits(float value) {
  int32_t a = static_cast<int32_t>(FloatBits(value) & 0x7fffffffu);
  return a < 0x7f800000 ? a : 0;
}

// Per-block quantization constants from the block's largest finite magnitude. Tiny blocks are
// pre-scaled by 2^64 (exact) so that qmax / absmax cannot overflow.
struct QuantScale {
  float scale;     // stored in the frame; value = code * scale
  float prescale;  // 1 or 2^64
  float inverse;   // qmax / (absmax * prescale), or 0 for an all-zero block
};

STRAIT_HD QuantScale MakeQuantScale(int32_t absmax_bits, float qmax) {
  float absmax = BitsFloat(static_cast<uint32_t>(absmax_bits));
  QuantScale q;
  q.scale = absmax / qmax;
  // Rounded down when rounding up made code * scale exceed absmax (it would overflow at FLT_MAX).
  if (Mul(q.scale, qmax) > absmax) q.scale = BitsFloat(FloatBits(q.scale) - 1);
  q.prescale = absmax_bits < (67 << 23) ? 18446744073709551616.0f : 1.0f;  // absmax < 2^-60
  float scaled = Mul(absmax, q.prescale);
  q.inverse = absmax_bits == 0 ? 0.0f : qmax / scaled;
  return q;
}

// splitmix64: advances `state` and returns the next of its well-mixed 64-bit values (seeds).
STRAIT_HD uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform noise in [0, 1) for stochastic rounding, a pure function of (seed, index) so that any
// device reproduces it (a 32-bit integer hash; lowbias32 by C. Wellons).
STRAIT_HD float RoundingNoise(uint64_t seed, uint64_t index) {
  uint32_t x = static_cast<uint32_t>(index) ^ static_cast<uint32_t>(seed);
  x += static_cast<uint32_t>(index >> 32) * 0x9e3779b9u + static_cast<uint32_t>(seed >> 32);
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return static_cast<float>(static_cast<int32_t>(x >> 8)) * (1.0f / 16777216.0f);
}

// Quantizes one value to an integer code in [-qmax, qmax]; NaN and Inf give `nan_code`.
// Round to nearest even, or floor(v + noise) for stochastic rounding.
STRAIT_HD int32_t QuantizeValue(float x, const QuantScale& s, int32_t qmax, bool stochastic,
                                float noise, int32_t nan_code) {
  uint32_t bits = FloatBits(x);
  bool finite = (bits & 0x7f800000u) != 0x7f800000u;
  float v = Mul(Mul(BitsFloat(finite ? bits : 0u), s.prescale), s.inverse);  // |v| <= qmax (+ulp)
  int32_t code;
  if (stochastic) {
    float t = Add(v, noise);
    int32_t truncated = static_cast<int32_t>(t);
    code = truncated - (static_cast<float>(truncated) > t ? 1 : 0);  // floor
  } else {
    const float kMagic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to even
    code = static_cast<int32_t>(Add(v, kMagic) - kMagic);
  }
  code = code > qmax ? qmax : (code < -qmax ? -qmax : code);
  return finite ? code : nan_code;
}

}  // namespace strait::compression
