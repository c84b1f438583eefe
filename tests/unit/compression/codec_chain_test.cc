// Chains end to end: lossless chains bit-exact, frames self-describing, shapes, value payloads.
#include "compression/codec_chain.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "compression/float_bits.h"
#include "tests/unit/compression/test_tensors.h"

namespace strait::compression {
namespace {

using testing::Bits;

TEST(CodecChainTest, LosslessChainsAreBitExact) {
  std::vector<float> special = {NAN,
                                -NAN,
                                INFINITY,
                                -INFINITY,
                                -0.0f,
                                0.0f,
                                std::numeric_limits<float>::denorm_min(),
                                std::numeric_limits<float>::max(),
                                BitsFloat(0x7f800001u)};
  for (const char* spec :
       {"none", "shuffle", "zstd", "zstd:-7", "zstd:19", "shuffle+zstd", "shuffle+zstd:3"}) {
    auto chain = *CodecChain::Create(spec);
    TensorDecoder decoder;
    for (size_t n : {0, 1, 2, 3, 9, 1000, 65537}) {
      std::vector<float> v = testing::Normal(n, n);
      for (size_t i = 0; i < std::min(n, special.size()); ++i) v[i] = special[i];
      absl::StatusOr<absl::Span<const uint8_t>> frame = chain->Encode(v, {n});
      ASSERT_TRUE(frame.ok()) << frame.status();
      DecodedTensor out;
      ASSERT_TRUE(decoder.Decode(*frame, &out).ok()) << spec;
      EXPECT_EQ(Bits(out.values), Bits(v)) << spec << " n=" << n;
    }
  }
}

// Zeros compress about 32768:1 (RLE blocks), right at the decoder's plausibility bound.
TEST(CodecChainTest, ZerosRoundTrip) {
  std::vector<float> zeros(1 << 22, 0.0f);
  for (const char* spec : {"zstd", "shuffle+zstd:19", "int8+zstd", "topk:0.001+zstd"}) {
    auto chain = *CodecChain::Create(spec);
    DecodedTensor out;
    absl::Status status = chain->Decode(*chain->Encode(zeros, {zeros.size()}), &out);
    ASSERT_TRUE(status.ok()) << spec << ": " << status;
    EXPECT_EQ(out.values, zeros) << spec;
  }
}

TEST(CodecChainTest, FramesDescribeThemselves) {
  const std::vector<uint64_t> shape = {2, 3, 5};
  std::vector<float> v = testing::Relu(30, 4);
  TensorDecoder decoder;  // one decoder, frames of every chain
  DecodedTensor out;
  for (const char* spec :
       {"none", "fp16", "bf16+shuffle+zstd:3", "int8+zstd", "int4:4:sr", "topk:0.5+zstd", "zstd"}) {
    auto chain = *CodecChain::Create(spec);
    absl::StatusOr<absl::Span<const uint8_t>> frame = chain->Encode(v, shape);
    ASSERT_TRUE(frame.ok()) << frame.status();
    ASSERT_TRUE(decoder.Decode(*frame, &out).ok()) << spec;
    EXPECT_EQ(std::vector<uint64_t>(out.shape.begin(), out.shape.end()), shape);
    EXPECT_EQ(out.chain, chain->spec());
    EXPECT_EQ(out.values.size(), 30u);
  }
}

TEST(CodecChainTest, ShapesScalarsAndMismatches) {
  auto chain = *CodecChain::Create("int8+zstd");
  std::vector<float> one = {3.5f};
  DecodedTensor out;
  ASSERT_TRUE(chain->Decode(*chain->Encode(one, {}), &out).ok());  // rank 0: one element
  EXPECT_TRUE(out.shape.empty());
  EXPECT_EQ(out.values, one);
  std::vector<float> v(256, 1.0f);
  EXPECT_TRUE(chain->Encode(v, {2, 2, 2, 2, 2, 2, 2, 2}).ok());
  EXPECT_FALSE(chain->Encode(v, {2, 2, 2, 2, 2, 2, 2, 2, 1}).ok());  // rank 9
  EXPECT_FALSE(chain->Encode(v, {255}).ok());
  EXPECT_TRUE(chain->Encode({}, {0, 7}).ok());
  EXPECT_FALSE(chain->Encode(v, {uint64_t{1} << 40, uint64_t{1} << 40}).ok());
  // A chain decodes its own frames only.
  auto other = *CodecChain::Create("int8:128+zstd");
  EXPECT_FALSE(other->Decode(*chain->Encode(v, {256}), &out).ok());
  EXPECT_FALSE(CodecChain::Create("int8+gzip").ok());
}

// A device encoder hands over the value stage's output; the frame must equal the CPU's.
TEST(CodecChainTest, EncodeValuePayloadMatchesEncode) {
  std::vector<float> v = testing::Relu(3000, 6);
  for (const char* spec : {"fp16", "bf16+shuffle+zstd", "int8+zstd", "int4", "topk:0.1+zstd"}) {
    auto chain = *CodecChain::Create(spec);
    auto value_only = CodecChain::Create(ChainSpec{{chain->spec().stages[0]}});
    absl::Span<const uint8_t> payload_frame = *value_only->Encode(v, {3000});
    std::vector<uint8_t> payload(payload_frame.begin() + FrameHeaderSize(1, 1),
                                 payload_frame.end());
    absl::Span<const uint8_t> encoded = *chain->Encode(v, {3000});
    std::vector<uint8_t> expected(encoded.begin(), encoded.end());
    absl::StatusOr<absl::Span<const uint8_t>> frame = chain->EncodeValuePayload(payload, {3000});
    ASSERT_TRUE(frame.ok()) << frame.status();
    EXPECT_EQ(std::vector<uint8_t>(frame->begin(), frame->end()), expected) << spec;
  }
  auto zstd = *CodecChain::Create("zstd");
  EXPECT_FALSE(zstd->EncodeValuePayload({}, {0}).ok());
}

// The other half of a device decoder: a frame decoded up to its value stage gives that stage's
// payload, which a chain-of-the-value-stage frame decodes to the frame's values.
TEST(CodecChainTest, DecodeValuePayloadStopsBeforeTheValueStage) {
  std::vector<float> v = testing::Relu(3000, 7);
  TensorDecoder decoder;
  for (const char* spec : {"fp16", "bf16+shuffle+zstd", "int8+zstd", "int4", "int8"}) {
    SCOPED_TRACE(spec);
    auto chain = *CodecChain::Create(spec);
    const absl::Span<const uint8_t> encoded = *chain->Encode(v, {30, 100});
    const std::vector<uint8_t> frame(encoded.begin(), encoded.end());
    DecodedPayload payload;
    ASSERT_TRUE(decoder.DecodeValuePayload(frame, &payload).ok());
    EXPECT_EQ(payload.element_count, 3000u);
    EXPECT_EQ(payload.shape, (Shape{30, 100}));
    auto value_only = CodecChain::Create(ChainSpec{{chain->spec().stages[0]}});
    absl::Span<const uint8_t> direct = *value_only->Encode(v, {30, 100});
    EXPECT_EQ(payload.value_payload,
              std::vector<uint8_t>(direct.begin() + FrameHeaderSize(2, 1), direct.end()));
    // A cut frame is refused, not read past its end.
    DecodedPayload cut;
    EXPECT_FALSE(
        decoder.DecodeValuePayload(absl::MakeConstSpan(frame).subspan(0, frame.size() - 1), &cut)
            .ok());
  }
  auto zstd = *CodecChain::Create("zstd");
  const absl::Span<const uint8_t> bytes = *zstd->Encode(v, {3000});
  DecodedPayload none;
  EXPECT_EQ(
      decoder.DecodeValuePayload(std::vector<uint8_t>(bytes.begin(), bytes.end()), &none).code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST(CodecChainTest, DecodeLimitRefusesLargeTensorsBeforeAllocating) {
  CodecOptions options;
  options.max_raw_bytes = 1000;
  auto chain = *CodecChain::Create("zstd", options);
  std::vector<float> small(250, 1.0f), large(251, 1.0f);
  DecodedTensor out;
  EXPECT_TRUE(chain->Decode(*chain->Encode(small, {250}), &out).ok());
  EXPECT_EQ(chain->Decode(*chain->Encode(large, {251}), &out).code(),
            absl::StatusCode::kResourceExhausted);
}

// Two links that carry nearly the same gradient must not round it with the same noise: their
// errors would add up coherently at the first stage (the residual stream's gradient at two
// boundaries is largely the same tensor).
TEST(CodecChainTest, EachStreamRoundsWithItsOwnNoise) {
  std::vector<float> v(4096);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.37f * std::sin(0.1f * i);
  auto errors = [&](uint64_t stream) {
    auto chain = *CodecChain::Create("int4:sr", CodecOptions{.seed = StreamSeed(stream)});
    DecodedTensor out;
    EXPECT_TRUE(chain->Decode(*chain->Encode(v, {4096}), &out).ok());
    std::vector<double> e(v.size());
    for (size_t i = 0; i < v.size(); ++i) e[i] = out.values[i] - v[i];
    return e;
  };
  auto correlation = [](const std::vector<double>& a, const std::vector<double>& b) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < a.size(); ++i) ab += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
    return ab / std::sqrt(aa * bb);
  };
  EXPECT_NE(StreamSeed(0), StreamSeed(1));
  EXPECT_DOUBLE_EQ(correlation(errors(3), errors(3)), 1.0);  // Reproducible.
  EXPECT_LT(std::abs(correlation(errors(2), errors(3))), 0.1);
  EXPECT_LT(std::abs(correlation(errors(0), errors(uint64_t{1} << 32))), 0.1);
}

}  // namespace
}  // namespace strait::compression
