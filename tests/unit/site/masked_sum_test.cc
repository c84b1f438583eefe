#include "site/exchange/masked_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <span>
#include <tuple>
#include <vector>

namespace strait::site {
namespace {

TEST(MaskedSumTest, LanesPackAndUnpackWithTheirSigns) {
  const std::vector<uint32_t> values = {static_cast<uint32_t>(-3), 5, 7, static_cast<uint32_t>(-8),
                                        1};
  for (int bits : {4, 8, 16, 32}) {
    const std::vector<uint32_t> words = PackLanes(values, bits);
    EXPECT_EQ(words.size(), (values.size() + 32 / bits - 1) / (32 / bits)) << bits;
    EXPECT_EQ(UnpackLanes(words, bits, values.size()), values) << bits;
  }
}

// The gateway's lane-wise sum (as SecureSum: each lane mod 2^bits, no carries).
void AddLanes(std::vector<uint32_t>& sum, const std::vector<uint32_t>& words, int bits) {
  if (sum.empty()) {
    sum = words;
    return;
  }
  const uint32_t mask = bits == 32 ? ~0u : (uint32_t{1} << bits) - 1;
  for (size_t w = 0; w < words.size(); ++w) {
    uint32_t out = 0;
    for (int lane = 0; lane < 32 / bits; ++lane) {
      const uint32_t a = (sum[w] >> (bits * lane)) & mask, b = (words[w] >> (bits * lane)) & mask;
      out |= ((a + b) & mask) << (bits * lane);
    }
    sum[w] = out;
  }
}

// What the replicas do (quantise, add masks that cancel over every lane of every word, padding
// included, pack) and what the gateway does (add lane by lane) give the mean of the quantised
// values; each replica's own share is what it stands for.
class NarrowSumTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(NarrowSumTest, TheMeanOfNarrowValuesSurvivesMasksAndPacking) {
  const auto [bits, replicas] = GetParam();
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 0.01f);
  const size_t n = 701;  // Three blocks, the last one short; 4-bit lanes leave padding.
  std::vector<float> last_mean(n);
  for (float& v : last_mean) v = normal(random);
  const SumFormat format = OuterSumFormat(bits, 24, replicas, last_mean);
  ASSERT_EQ(format.bits, bits);
  ASSERT_EQ(format.steps.size(), 3u);
  EXPECT_EQ(format.bound(), ((1 << (bits - 1)) - 1) / replicas);
  const size_t masked = MaskedCount(n, bits);
  EXPECT_EQ(masked % (32 / bits), 0u);

  std::vector<uint32_t> masks_total(masked, 0);
  std::vector<uint32_t> gateway;
  std::vector<double> expected(n, 0.0);
  std::vector<int32_t> expected_q(n, 0);
  for (int r = 0; r < replicas; ++r) {
    std::vector<float> values(n);
    // Half the replicas at the bound's edge: the sum must still not wrap.
    for (float& v : values) v = r % 2 == 0 ? normal(random) : 10.0f;
    std::vector<uint32_t> q(masked, 0);
    QuantizeForSum(values, format, std::span(q).first(n));
    std::vector<float> own(n);
    DequantizeOwn(std::span(q).first(n), format, own);
    for (size_t i = 0; i < n; ++i) {
      expected[i] += own[i];
      expected_q[i] += static_cast<int32_t>(q[i]);
    }
    for (size_t i = 0; i < masked; ++i) {
      const uint32_t mask = r + 1 < replicas ? static_cast<uint32_t>(random()) : -masks_total[i];
      masks_total[i] += mask;
      q[i] += mask;
    }
    AddLanes(gateway, PackLanes(q, bits), bits);
  }
  const std::vector<uint32_t> sum = UnpackLanes(gateway, bits, masked);
  for (size_t i = n; i < masked; ++i) EXPECT_EQ(sum[i], 0u) << "padding lane " << i;
  std::vector<float> mean(n);
  MeanOfSum(std::span(sum).first(n), format, mean);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(static_cast<int32_t>(sum[i]), expected_q[i]) << i;  // Exact: what was sent.
    EXPECT_NEAR(mean[i], expected[i] / replicas, 1e-6 * std::fabs(expected[i])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, NarrowSumTest,
                         ::testing::Combine(::testing::Values(4, 8, 16),
                                            ::testing::Values(2, 3, 7)));

TEST(MaskedSumTest, TheFirstOuterRoundIsThirtyTwoBitFixedPoint) {
  const SumFormat format = OuterSumFormat(8, 20, 2, {});
  EXPECT_EQ(format.bits, 32);
  EXPECT_EQ(format.steps, (std::vector<double>{std::ldexp(1.0, -20)}));
  EXPECT_EQ(format.lanes(), 1);
}

}  // namespace
}  // namespace strait::site
