// training.precision: bf16 on the CPU backend: the rounding (known answers) and matrix products
// that equal fp32 products of the rounded inputs, bit for bit: the reference the CUDA backend's
// tensor-core products are tested against (backend_ops_test).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "site/backend/counter_rng.h"
#include "site/backend/cpu/cpu_backend.h"
#include "site/backend/op_math.h"

namespace strait::site {
namespace {

uint32_t Bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

std::vector<float> Random(size_t n, uint64_t key) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 2.0f * CounterUniform(key, i) - 1.0f;
  return v;
}

std::vector<float> Rounded(std::vector<float> v) {
  for (float& x : v) x = RoundToBf16(x);
  return v;
}

TEST(Bf16ProductsTest, RoundsToNearestEven) {
  EXPECT_EQ(RoundToBf16(1.0f), 1.0f);
  EXPECT_EQ(RoundToBf16(-2.5f), -2.5f);
  // bf16 keeps 7 fraction bits: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 (odd): to 1.
  EXPECT_EQ(RoundToBf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  EXPECT_EQ(RoundToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(RoundToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(Bits(RoundToBf16(0.1f)), 0x3dcd0000u);  // 0x3dcccccd rounds up.
  EXPECT_EQ(RoundToBf16(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(RoundToBf16(-std::numeric_limits<float>::infinity()),
            -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(RoundToBf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(Bits(RoundToBf16(-0.0f)), 0x80000000u);
  for (float x : Random(1000, 1)) EXPECT_EQ(Bits(RoundToBf16(x)) & 0xffffu, 0u);
}

TEST(Bf16ProductsTest, GemmIsTheFp32ProductOfRoundedInputs) {
  auto fp32 = *CreateCpuBackend(2), bf16 = *CreateCpuBackend(2, Precision::kBf16);
  EXPECT_NE(bf16->Name().find("bf16"), std::string::npos);
  const int m = 37, n = 29, k = 41;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::vector<float> a = Random(m * k, 2), b = Random(k * n, 3), c0 = Random(m * n, 4);
      const std::vector<float> ra = Rounded(a), rb = Rounded(b);
      std::vector<float> want = c0, got = c0, plain = c0;
      fp32->Gemm(ta, tb, m, n, k, 0.7f, ra.data(), ta ? m : k, rb.data(), tb ? k : n, 0.5f,
                 want.data(), n);
      bf16->Gemm(ta, tb, m, n, k, 0.7f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.5f,
                 got.data(), n);
      fp32->Gemm(ta, tb, m, n, k, 0.7f, a.data(), ta ? m : k, b.data(), tb ? k : n, 0.5f,
                 plain.data(), n);
      EXPECT_EQ(got, want) << "ta " << ta << " tb " << tb;
      EXPECT_NE(got, plain);
      // C itself is not rounded: beta * C adds in fp32.
      for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], plain[i], 0.05f);
    }
  }
}

// Attention's products read interleaved heads: operands with gaps between rows and matrices.
TEST(Bf16ProductsTest, BatchedGemmOnInterleavedOperands) {
  auto fp32 = *CreateCpuBackend(2), bf16 = *CreateCpuBackend(2, Precision::kBf16);
  const int tokens = 12, head_dim = 8, heads = 3, ld = 3 * heads * head_dim;  // q|k|v rows
  const std::vector<float> qkv = Random(tokens * ld, 5), rounded = Rounded(qkv);
  std::vector<float> want(heads * tokens * tokens), got(want.size());
  // scores[h] = q_h k_h^T, q_h at column h * head_dim, k_h at heads * head_dim + h * head_dim.
  const int key_offset = heads * head_dim;
  fp32->GemmBatched(false, true, tokens, tokens, head_dim, 1.0f, rounded.data(), ld, head_dim,
                    rounded.data() + key_offset, ld, head_dim, 0.0f, want.data(), tokens,
                    tokens * tokens, heads);
  bf16->GemmBatched(false, true, tokens, tokens, head_dim, 1.0f, qkv.data(), ld, head_dim,
                    qkv.data() + key_offset, ld, head_dim, 0.0f, got.data(), tokens,
                    tokens * tokens, heads);
  EXPECT_EQ(got, want);
}

TEST(Bf16ProductsTest, MatrixSpanCoversWhatAProductReads) {
  EXPECT_EQ(MatrixSpan(3, 4, 4), 12);
  EXPECT_EQ(MatrixSpan(3, 4, 10), 24);  // The last row needs only its 4 columns.
  EXPECT_EQ(MatrixSpan(3, 4, 10, 100, 2), 124);
  EXPECT_EQ(MatrixSpan(0, 4, 10), 0);
}

}  // namespace
}  // namespace strait::site
