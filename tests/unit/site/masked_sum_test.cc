#include "site/exchange/masked_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace strait::site {
namespace {

TEST(MaskedSumTest, LanesPackAndUnpackWithTheirSigns) {
  const std::vector<uint32_t> values = {static_cast<uint32_t>(-3), 5, 127,
                                        static_cast<uint32_t>(-128), 1};
  for (int bits : {8, 16, 32}) {
    const std::vector<uint32_t> words = PackLanes(values, bits);
    EXPECT_EQ(words.size(), (values.size() + 32 / bits - 1) / (32 / bits)) << bits;
    EXPECT_EQ(UnpackLanes(words, bits, values.size()), values) << bits;
  }
}

// What the replicas do (quantise, add masks that cancel, pack) and what the gateway does (add
// lane by lane) give the mean of the quantised values; each replica's own share is what it
// stands for.
TEST(MaskedSumTest, TheMeanOfNarrowValuesSurvivesMasksAndPacking) {
  std::mt19937 random(7);
  std::normal_distribution<float> normal(0.0f, 0.01f);
  const int replicas = 3;
  const size_t n = 700;  // Three blocks, the last one short.
  std::vector<float> last_mean(n);
  for (float& v : last_mean) v = normal(random);
  const SumFormat format = OuterSumFormat(8, 24, replicas, last_mean);
  ASSERT_EQ(format.bits, 8);
  ASSERT_EQ(format.steps.size(), 3u);
  EXPECT_EQ(format.bound(), 42);  // 127 / 3

  std::vector<std::vector<float>> values(replicas, std::vector<float>(n));
  std::vector<uint32_t> masks_total(n, 0);
  std::vector<uint32_t> gateway;  // The sum of the packed words, lane by lane.
  std::vector<double> expected(n, 0.0);
  for (int r = 0; r < replicas; ++r) {
    for (float& v : values[r]) v = normal(random);
    std::vector<uint32_t> q(n);
    QuantizeForSum(values[r], format, q);
    std::vector<float> own(n);
    DequantizeOwn(q, format, own);
    for (size_t i = 0; i < n; ++i) {
      expected[i] += own[i];
      EXPECT_LE(std::fabs(own[i] - values[r][i]), format.step(i) * 0.5 + 1e-12)
          << "replica " << r << " value " << i;
      // Masks: random words that sum to zero over the replicas.
      const uint32_t mask = r + 1 < replicas ? static_cast<uint32_t>(random()) : -masks_total[i];
      masks_total[i] += mask;
      q[i] += mask;
    }
    const std::vector<uint32_t> words = PackLanes(q, 8);
    if (gateway.empty()) {
      gateway = words;
    } else {
      for (size_t w = 0; w < words.size(); ++w) {  // Byte lanes, no carries (as SecureSum).
        uint32_t out = 0;
        for (int lane = 0; lane < 4; ++lane) {
          const uint32_t a = (gateway[w] >> (8 * lane)) & 0xff, b = (words[w] >> (8 * lane)) & 0xff;
          out |= ((a + b) & 0xff) << (8 * lane);
        }
        gateway[w] = out;
      }
    }
  }
  std::vector<float> mean(n);
  MeanOfSum(UnpackLanes(gateway, 8, n), format, mean);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(mean[i], expected[i] / replicas, 1e-7) << i;
  }
}

TEST(MaskedSumTest, TheFirstOuterRoundIsThirtyTwoBitFixedPoint) {
  const SumFormat format = OuterSumFormat(8, 20, 2, {});
  EXPECT_EQ(format.bits, 32);
  EXPECT_EQ(format.steps, (std::vector<double>{std::ldexp(1.0, -20)}));
  EXPECT_EQ(format.lanes(), 1);
}

}  // namespace
}  // namespace strait::site
