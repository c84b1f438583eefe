// fp16 and bf16: round to nearest even against independent references, NaN/Inf preserved.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "compression/codec_chain.h"
#include "compression/float_bits.h"
#include "tests/unit/compression/test_tensors.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace strait::compression {
namespace {

// Exact value of a half from its fields.
double HalfReference(uint16_t h) {
  int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  double sign = (h & 0x8000) ? -1 : 1;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

// Nearest representable by exhaustive search among the candidates around x; ties to even.
template <typename Decode>
uint16_t NearestReference(float x, Decode decode, uint16_t max_finite_bits) {
  uint16_t best = 0;
  double best_error = INFINITY;
  uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  for (uint32_t m = 0; m <= max_finite_bits; ++m) {
    uint16_t candidate = static_cast<uint16_t>(m | sign);
    double error = std::fabs(static_cast<double>(decode(candidate)) - x);
    if (error < best_error || (error == best_error && (candidate & 1) == 0)) {
      best = candidate;
      best_error = error;
    }
  }
  return best;
}

TEST(CastTest, HalfToFloatIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    double expected = HalfReference(static_cast<uint16_t>(h));
    float got = HalfBitsToFloat(static_cast<uint16_t>(h));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << h;
    } else {
      EXPECT_EQ(static_cast<double>(got), expected) << h;
    }
  }
}

std::vector<float> EdgeValues() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          1e6f,
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          5.96e-8f,
                          2.98e-8f,
                          2.9802326e-08f,
                          6.1e-5f,
                          1.0009765625f,
                          1.00048828125f,
                          1.00146484375f,
                          3.0e-39f,
                          0.1f,
                          -0.3f};
  for (int e = -30; e <= 20; ++e) {
    for (float m : {1.0f, 1.5f, 1.00048828125f, 1.0004883f, 1.9999999f})
      v.push_back(std::ldexp(m, e));
  }
  return v;
}

TEST(CastTest, FloatToHalfRoundsToNearestEven) {
  std::vector<float> values = EdgeValues();
  std::vector<float> normal = testing::Normal(2000, 1, 100.0f);
  values.insert(values.end(), normal.begin(), normal.end());
  for (float x : values) {
    uint16_t expected = std::fabs(x) >= 65520.0f
                            ? static_cast<uint16_t>((std::signbit(x) ? 0x8000 : 0) | 0x7c00)
                            : NearestReference(x, HalfReference, 0x7bff);
    EXPECT_EQ(FloatToHalfBits(x), expected) << x;
  }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t HardwareHalf(float x) {
  return static_cast<uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

// Against the CPU's own conversion (F16C), over a stride through every float bit pattern.
TEST(CastTest, FloatToHalfMatchesF16c) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU";
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 997) {
    float x = BitsFloat(static_cast<uint32_t>(bits));
    ASSERT_EQ(FloatToHalfBits(x), HardwareHalf(x)) << bits;  // NaN payloads included
  }
}
#endif

TEST(CastTest, FloatToBf16RoundsToNearestEven) {
  std::vector<float> values = EdgeValues();
  std::vector<float> normal = testing::Normal(500, 2, 1e-20f);
  values.insert(values.end(), normal.begin(), normal.end());
  for (float x : values) {
    uint16_t got = FloatToBf16Bits(x);
    // Candidates: truncation and the next bf16 up in magnitude.
    uint32_t bits = FloatBits(x);
    uint16_t down = static_cast<uint16_t>(bits >> 16), up = static_cast<uint16_t>(down + 1);
    double ed = std::fabs(static_cast<double>(Bf16BitsToFloat(down)) - x);
    double eu = std::fabs(static_cast<double>(Bf16BitsToFloat(up)) - x);
    uint16_t expected = ed < eu || (ed == eu && (down & 1) == 0) ? down : up;
    if ((bits & 0x7fffffff) > 0x7f7f7fff && (bits & 0x7fffffff) < 0x7f800000) {
      expected = static_cast<uint16_t>((bits >> 16 & 0x8000) | 0x7f80);  // rounds up to Inf
    }
    EXPECT_EQ(got, expected) << x;
  }
}

TEST(CastTest, Bf16RelativeErrorAtMostTwoToMinusEight) {
  std::vector<float> values = testing::Normal(100000, 3);
  std::vector<float> wide = testing::Normal(1000, 4, 1e30f);
  values.insert(values.end(), wide.begin(), wide.end());
  for (float x : values) {
    float y = Bf16BitsToFloat(FloatToBf16Bits(x));
    ASSERT_LE(std::fabs(y - x), std::ldexp(std::fabs(x), -8)) << x;
  }
}

TEST(CastTest, ChainsPreserveNanInfAndHandleOddSizes) {
  for (const char* spec : {"fp16", "bf16", "fp16+shuffle+zstd", "bf16+shuffle+zstd:3"}) {
    auto chain = *CodecChain::Create(spec);
    for (size_t n : {0, 1, 2, 7, 1001}) {
      std::vector<float> values = testing::Normal(n, n);
      if (n >= 7) {
        values[0] = NAN;
        values[1] = INFINITY;
        values[2] = -INFINITY;
        values[3] = std::numeric_limits<float>::denorm_min();
        values[4] = 1e30f;
        values[5] = -0.0f;
      }
      absl::StatusOr<absl::Span<const uint8_t>> frame = chain->Encode(values, {n});
      ASSERT_TRUE(frame.ok()) << frame.status();
      DecodedTensor out;
      ASSERT_TRUE(chain->Decode(*frame, &out).ok());
      ASSERT_EQ(out.values.size(), n);
      bool half = std::string(spec).starts_with("fp16");
      for (size_t i = 0; i < n; ++i) {
        float expected = half ? HalfBitsToFloat(FloatToHalfBits(values[i]))
                              : Bf16BitsToFloat(FloatToBf16Bits(values[i]));
        if (std::isnan(values[i])) {
          EXPECT_TRUE(std::isnan(out.values[i]));
        } else {
          EXPECT_EQ(FloatBits(out.values[i]), FloatBits(expected)) << spec << " " << i;
        }
      }
      if (n >= 7) {
        EXPECT_EQ(out.values[1], INFINITY);
        EXPECT_EQ(out.values[2], -INFINITY);
        EXPECT_TRUE(std::signbit(out.values[5]));
        EXPECT_EQ(out.values[4], half ? INFINITY : Bf16BitsToFloat(FloatToBf16Bits(1e30f)));
      }
    }
  }
}

}  // namespace
}  // namespace strait::compression
