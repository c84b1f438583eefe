// topk: keeps the largest magnitudes, delta-coded indices; error feedback loses nothing over time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "compression/codec_chain.h"
#include "compression/float_bits.h"
#include "compression/topk_stage.h"
#include "tests/unit/compression/test_tensors.h"

namespace strait::compression {
namespace {

float Bf16(float x) { return Bf16BitsToFloat(FloatToBf16Bits(x)); }

// The reference: sort indices by magnitude (descending), ties by index, keep the first k.
std::vector<size_t> ReferenceTopK(const std::vector<float>& v, size_t k) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return MagnitudeKey(FloatBits(v[a])) > MagnitudeKey(FloatBits(v[b]));
  });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

void CheckTopK(const char* spec, const std::vector<float>& v, double fraction) {
  auto chain = *CodecChain::Create(spec);
  absl::StatusOr<absl::Span<const uint8_t>> frame = chain->Encode(v, {v.size()});
  ASSERT_TRUE(frame.ok()) << frame.status();
  DecodedTensor out;
  ASSERT_TRUE(chain->Decode(*frame, &out).ok());
  ASSERT_EQ(out.values.size(), v.size());
  std::vector<float> expected(v.size(), 0.0f);
  for (size_t i : ReferenceTopK(v, TopKCount(v.size(), fraction))) expected[i] = Bf16(v[i]);
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(out.values[i]));
    } else {
      EXPECT_EQ(out.values[i], expected[i]) << spec << " n=" << v.size() << " i=" << i;
    }
  }
}

TEST(TopKTest, CountRoundsAndKeepsAtLeastOne) {
  EXPECT_EQ(TopKCount(0, 0.5), 0u);
  EXPECT_EQ(TopKCount(1, 0.001), 1u);
  EXPECT_EQ(TopKCount(1000, 0.01), 10u);
  EXPECT_EQ(TopKCount(1000, 1.0), 1000u);
  EXPECT_EQ(TopKCount(3, 0.5), 2u);
}

TEST(TopKTest, KeepsTheLargestMagnitudes) {
  for (size_t n : {0, 1, 2, 5, 100, 1001, 100000}) {
    CheckTopK("topk:0.01", testing::Normal(n, n), 0.01);
    CheckTopK("topk:0.3+zstd", testing::Normal(n, n + 1), 0.3);
    CheckTopK("topk:1", testing::Normal(n, n + 2), 1.0);
  }
}

TEST(TopKTest, TiesGoToLowestIndicesAndNonFiniteCount) {
  std::vector<float> v(1000, 1.0f);  // all tied
  CheckTopK("topk:0.01", v, 0.01);
  for (size_t i = 0; i < v.size(); i += 3) v[i] = -1.0f;
  v[500] = NAN;
  v[600] = -INFINITY;
  v[700] = std::numeric_limits<float>::denorm_min();
  CheckTopK("topk:0.05", v, 0.05);
  std::vector<float> big = testing::Normal(5000, 8, 1e37f);
  big[10] = std::numeric_limits<float>::max();
  CheckTopK("topk:0.02+shuffle+zstd", big, 0.02);
}

// Error feedback: decoded + residual == inputs summed over steps, so the decoded sum converges to
// the input sum; without feedback the small components are never sent.
TEST(TopKTest, ErrorFeedbackConvergesToTheSumOfInputs) {
  const size_t n = 2000;
  const int steps = 1000;
  for (bool feedback : {true, false}) {
    auto chain = *CodecChain::Create(feedback ? "topk:0.01:ef+zstd" : "topk:0.01+zstd");
    ResidualStore residuals;
    std::vector<double> sum_in(n, 0.0), sum_out(n, 0.0);
    DecodedTensor out;
    for (int step = 0; step < steps; ++step) {
      std::vector<float> g = testing::Normal(n, 100 + step, 0.1f);
      for (size_t i = 0; i < n; ++i) g[i] += 0.05f * static_cast<float>(i % 10 + 1);  // a drift
      ASSERT_TRUE(chain->Decode(*chain->Encode(g, {n}, &residuals, "b0/bwd"), &out).ok());
      for (size_t i = 0; i < n; ++i) {
        sum_in[i] += g[i];
        sum_out[i] += out.values[i];
      }
    }
    double error = 0, total = 0;
    for (size_t i = 0; i < n; ++i) {
      error += std::fabs(sum_in[i] - sum_out[i]);
      total += std::fabs(sum_in[i]);
    }
    if (feedback) {
      EXPECT_LT(error / total, 0.08);  // what is left is one bounded residual, not 1000 steps
      absl::Span<float> r = *residuals.Get("b0/bwd", n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(sum_in[i] - sum_out[i], r[i], 1e-3 * (1 + std::fabs(sum_in[i]))) << i;
      }
    } else {
      EXPECT_GT(error / total, 0.5);
    }
  }
}

TEST(TopKTest, ErrorFeedbackNeedsAStoreAndAStableSize) {
  auto chain = *CodecChain::Create("topk:0.1:ef");
  std::vector<float> v = testing::Normal(100, 1);
  EXPECT_EQ(chain->Encode(v, {100}).status().code(), absl::StatusCode::kFailedPrecondition);
  ResidualStore residuals;
  EXPECT_TRUE(chain->Encode(v, {100}, &residuals, "k").ok());
  EXPECT_FALSE(chain->Encode(absl::MakeSpan(v).subspan(0, 50), {50}, &residuals, "k").ok());
  EXPECT_TRUE(chain->Encode(absl::MakeSpan(v).subspan(0, 50), {50}, &residuals, "j").ok());
  EXPECT_EQ(residuals.key_count(), 2u);
  residuals.Erase("k");
  EXPECT_EQ(residuals.key_count(), 1u);
  // A non-finite value is sent (or dropped) but never kept in the residual.
  v[7] = NAN;
  ASSERT_TRUE(chain->Encode(v, {100}, &residuals, "n").ok());
  absl::StatusOr<absl::Span<float>> residual = residuals.Get("n", 100);
  ASSERT_TRUE(residual.ok());
  for (size_t i = 0; i < residual->size(); ++i) EXPECT_TRUE(std::isfinite((*residual)[i]));
}

}  // namespace
}  // namespace strait::compression
