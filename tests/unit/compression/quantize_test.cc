// int8/int4: error <= scale/2 per element, stochastic rounding unbiased, NaN/Inf, odd sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/codec_chain.h"
#include "compression/float_bits.h"
#include "compression/quantize_stage.h"
#include "tests/unit/compression/test_tensors.h"

namespace strait::compression {
namespace {

// The block's scale: largest finite magnitude / qmax, rounded down if rounding up overshot.
float ReferenceScale(const std::vector<float>& v, size_t first, size_t m, float qmax) {
  float amax = 0;
  for (size_t i = first; i < first + m; ++i) {
    if (std::isfinite(v[i])) amax = std::max(amax, std::fabs(v[i]));
  }
  float scale = amax / qmax;
  return scale * qmax > amax ? std::nextafter(scale, 0.0f) : scale;  // never above amax / qmax
}

// Encodes and decodes `values`, checks every element against scale/2 (round to nearest) or one
// scale (stochastic), NaN for non-finite inputs, and the stored scales against the reference.
void CheckQuantizer(const std::string& spec, const std::vector<float>& values) {
  SCOPED_TRACE(absl::StrCat(spec, " n=", values.size()));
  auto chain = *CodecChain::Create(spec);
  const StageSpec stage = chain->spec().stages[0];
  const int bits = stage.kind == StageKind::kInt8 ? 8 : 4;
  const float qmax = bits == 8 ? 127.0f : 7.0f;
  const size_t n = values.size(), block = stage.block_size;
  absl::StatusOr<absl::Span<const uint8_t>> frame = chain->Encode(values, {n});
  ASSERT_TRUE(frame.ok()) << frame.status();
  DecodedTensor out;
  ASSERT_TRUE(chain->Decode(*frame, &out).ok());
  ASSERT_EQ(out.values.size(), n);
  if (chain->spec().stages.size() == 1) {
    const uint8_t* payload = frame->data() + FrameHeaderSize(1, 1);
    ASSERT_EQ(frame->size() - FrameHeaderSize(1, 1), QuantizedSize(bits, n, block));
    for (size_t b = 0; b * block < n; ++b) {
      float stored;
      std::memcpy(&stored, payload + 4 * b, 4);
      ASSERT_EQ(stored, ReferenceScale(values, b * block, std::min(block, n - b * block), qmax));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) {
      ASSERT_TRUE(std::isnan(out.values[i])) << i;
      continue;
    }
    size_t first = i / block * block;
    float scale = ReferenceScale(values, first, std::min(block, n - first), qmax);
    // A tiny slack for the rounding of scale and of x * qmax / absmax; a denormal scale is only
    // as precise as the denormal grid (one step, 2^-149), and codes multiply that by up to qmax.
    double bound =
        (stage.stochastic ? 1.0 : 0.5) * scale * (1 + 1e-4) + qmax * std::ldexp(1.0, -149);
    ASSERT_LE(std::fabs(static_cast<double>(out.values[i]) - values[i]), bound)
        << i << ": " << values[i] << " -> " << out.values[i];
  }
}

TEST(QuantizeTest, ErrorAtMostHalfAScale) {
  for (const char* spec : {"int8", "int4", "int8:2", "int4:2", "int8:1000", "int4:64", "int8+zstd",
                           "int4+shuffle+zstd:5", "int8:sr", "int4:32:sr"}) {
    for (size_t n : {0, 1, 2, 3, 255, 256, 257, 1001, 4096}) {
      CheckQuantizer(spec, testing::Normal(n, n + 7));
    }
    CheckQuantizer(spec, testing::Relu(10000, 9));
  }
}

TEST(QuantizeTest, NonFiniteHugeAndDenormalValues) {
  std::vector<float> v = testing::Normal(1024, 5);
  v[3] = NAN;
  v[4] = INFINITY;
  v[5] = -INFINITY;
  for (int i = 256; i < 512; ++i) v[i] = std::numeric_limits<float>::denorm_min() * (i - 300);
  for (int i = 512; i < 768; ++i) v[i] = std::numeric_limits<float>::max() / 300 * (i - 640);
  v[700] = std::numeric_limits<float>::max();
  v[701] = -std::numeric_limits<float>::max();
  for (int i = 768; i < 1024; ++i) v[i] = 1e-39f * (i % 7);
  for (const char* spec : {"int8", "int4", "int8:sr", "int4:sr"}) CheckQuantizer(spec, v);
  // An all-zero block and a block of only NaN.
  std::vector<float> zeros(300, 0.0f);
  for (int i = 256; i < 300; ++i) zeros[i] = NAN;
  CheckQuantizer("int8", zeros);
  CheckQuantizer("int4", zeros);
}

// Stochastic rounding is unbiased: the mean of many independent draws converges to the input.
TEST(QuantizeTest, StochasticRoundingIsUnbiased) {
  for (const char* spec : {"int8:sr", "int4:sr"}) {
    const float qmax = std::string(spec).starts_with("int8") ? 127.0f : 7.0f;
    std::vector<float> v = testing::Normal(256, 11);
    const float scale = ReferenceScale(v, 0, 256, qmax);
    auto chain = *CodecChain::Create(spec);
    std::vector<double> sum(v.size(), 0.0);
    const int draws = 4000;
    DecodedTensor out;
    for (int d = 0; d < draws; ++d) {
      ASSERT_TRUE(chain->Decode(*chain->Encode(v, {v.size()}), &out).ok());
      for (size_t i = 0; i < v.size(); ++i) sum[i] += out.values[i];
    }
    // Each draw errs by at most one scale: the mean's standard error is <= scale / sqrt(draws);
    // 5 of those bounds every element with overwhelming probability.
    double worst = 0;
    for (size_t i = 0; i < v.size(); ++i) worst = std::max(worst, std::fabs(sum[i] / draws - v[i]));
    EXPECT_LE(worst, 5 * scale / std::sqrt(draws)) << spec;
    // Round-to-nearest, in contrast, is biased for values between codes.
  }
}

TEST(QuantizeTest, CompressesReluActivations) {
  std::vector<float> v = testing::Relu(1 << 16, 3);
  auto int8 = *CodecChain::Create("int8");
  auto int4 = *CodecChain::Create("int4");
  EXPECT_LT(int8->Encode(v, {v.size()})->size(), v.size() * 1.02 + 100);
  EXPECT_LT(int4->Encode(v, {v.size()})->size(), v.size() * 0.52 + 100);
}

}  // namespace
}  // namespace strait::compression
