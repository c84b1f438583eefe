// Tensor -> frame -> tensor across one link direction: lossless chains are bit-exact, and a frame
// that was altered, replayed, relabelled or sent unsealed on an encrypted link never decodes.
#include "site/exchange/frame_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>

namespace strait::site {
namespace {

crypto::DirectionKey TestKey(uint8_t seed) {
  crypto::DirectionKey key;
  for (size_t i = 0; i < key.key.size(); ++i) key.key[i] = static_cast<uint8_t>(seed + i);
  key.nonce_salt = {seed, 1, 2, 3};
  key.key_epoch = 2;
  return key;
}

v1::TensorKey Key(uint32_t microbatch) {
  v1::TensorKey key;
  key.set_job("fed");
  key.set_step(5);
  key.set_microbatch(microbatch);
  key.set_boundary(1);
  key.set_direction(v1::FORWARD);
  return key;
}

const std::vector<int64_t> kShape = {4, 33};

std::vector<float> Values() {
  std::vector<float> v(4 * 33);
  for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 3 == 0) ? 0.0f : std::sin(0.37f * i) * 3.0f;
  return v;
}

struct Link {
  std::unique_ptr<FrameEncoder> encoder;
  std::unique_ptr<FrameDecoder> decoder;
};

Link MakeLink(const std::string& chain, bool encrypted) {
  Link link;
  auto sealer = encrypted ? *crypto::Sealer::Create(TestKey(7), 1 << 30) : nullptr;
  auto opener = encrypted ? *crypto::Opener::Create(TestKey(7)) : nullptr;
  link.encoder = *FrameEncoder::Create(chain, std::move(sealer));
  link.decoder = std::make_unique<FrameDecoder>(std::move(opener), 1 << 20);
  return link;
}

ReceivedFrame Received(const FrameEncoder::Frame& frame) { return {frame.header, frame.body}; }

TEST(FrameCodecTest, LosslessChainsAreBitExactSealedOrNot) {
  for (const char* chain : {"none", "zstd", "shuffle+zstd:3"}) {
    for (bool encrypted : {true, false}) {
      SCOPED_TRACE(std::string(chain) + (encrypted ? " sealed" : " plain"));
      Link link = MakeLink(chain, encrypted);
      const std::vector<float> values = Values();
      auto frame = link.encoder->Encode(Key(0), values, kShape);
      ASSERT_TRUE(frame.ok()) << frame.status();
      EXPECT_EQ(frame->header.sealed(), encrypted);
      EXPECT_EQ(frame->header.raw_bytes(), values.size() * 4);
      EXPECT_EQ(frame->header.wire_bytes(), frame->body.size());
      auto decoded = link.decoder->Decode(Key(0), kShape, Received(*frame));
      ASSERT_TRUE(decoded.ok()) << decoded.status();
      ASSERT_EQ(decoded->size(), values.size());
      EXPECT_EQ(std::memcmp(decoded->data(), values.data(), values.size() * 4), 0);
    }
  }
}

TEST(FrameCodecTest, LossyChainRoundTripsWithinItsError) {
  Link link = MakeLink("bf16+zstd", true);
  const std::vector<float> values = Values();
  auto frame = link.encoder->Encode(Key(1), values, kShape);
  ASSERT_TRUE(frame.ok());
  auto decoded = link.decoder->Decode(Key(1), kShape, Received(*frame));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_NEAR((*decoded)[i], values[i], std::abs(values[i]) / 128);
}

// A klt link's ends build their stages' math with the factory the site gives them (its GPU's,
// backend_factory.h KltMathFor); compression's klt_test checks the stage multiplies with it.
TEST(FrameCodecTest, KltLinksTransformWithTheSitesMath) {
  int made = 0;
  const compression::KltMathFactory math = [&made] {
    ++made;
    return compression::MakeHostKltMath();
  };
  auto encoder =
      FrameEncoder::Create("klt:0.1", nullptr, compression::CodecOptions{}.seed, nullptr, math);
  ASSERT_TRUE(encoder.ok()) << encoder.status();
  EXPECT_GT(made, 0);
  const int by_encoder = made;
  auto decoder = FrameDecoder::ForChains(nullptr, 1 << 20, {"klt:0.1", "none"}, nullptr, math);
  ASSERT_TRUE(decoder.ok());
  const std::vector<int64_t> shape = {64, 8};  // Rows enough for a basis in the first frame.
  std::vector<float> values(64 * 8);
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.37f * i) * (1 + i % 8);
  auto frame = (*encoder)->Encode(Key(0), values, shape);
  ASSERT_TRUE(frame.ok()) << frame.status();
  auto decoded = (*decoder)->Decode(Key(0), shape, Received(*frame));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_GT(made, by_encoder);
  for (size_t i = 0; i < values.size(); ++i) EXPECT_NEAR((*decoded)[i], values[i], 0.5) << i;
}

TEST(FrameCodecTest, AlteredBodyOrHeaderIsTampered) {
  Link link = MakeLink("zstd", true);
  const std::vector<float> values = Values();
  auto frame = *link.encoder->Encode(Key(0), values, kShape);
  ReceivedFrame flipped = Received(frame);
  flipped.body[flipped.body.size() / 2] ^= 0x01;
  auto result = link.decoder->Decode(Key(0), kShape, flipped);
  EXPECT_EQ(crypto::GetOpenError(result.status()), crypto::OpenError::kTampered) << result.status();

  // Relabelled to another microbatch (the key the victim is pulling): the AAD no longer matches.
  ReceivedFrame moved = Received(frame);
  moved.header.mutable_key()->set_microbatch(3);
  result = link.decoder->Decode(Key(3), kShape, moved);
  EXPECT_EQ(crypto::GetOpenError(result.status()), crypto::OpenError::kTampered) << result.status();

  ReceivedFrame relabelled = Received(frame);
  relabelled.header.set_codec_chain("none");
  result = link.decoder->Decode(Key(0), kShape, relabelled);
  EXPECT_EQ(crypto::GetOpenError(result.status()), crypto::OpenError::kTampered) << result.status();
}

TEST(FrameCodecTest, ReplayedFrameIsRefused) {
  Link link = MakeLink("none", true);
  auto frame = *link.encoder->Encode(Key(0), Values(), kShape);
  ASSERT_TRUE(link.decoder->Decode(Key(0), kShape, Received(frame)).ok());
  auto again = link.decoder->Decode(Key(0), kShape, Received(frame));
  EXPECT_EQ(crypto::GetOpenError(again.status()), crypto::OpenError::kReplayed) << again.status();
}

TEST(FrameCodecTest, ChecksKeyShapeAndSealing) {
  Link link = MakeLink("none", true);
  auto frame = *link.encoder->Encode(Key(0), Values(), kShape);
  EXPECT_EQ(link.decoder->Decode(Key(1), kShape, Received(frame)).status().code(),
            absl::StatusCode::kInvalidArgument);  // not the key that was pulled
  EXPECT_EQ(link.decoder->Decode(Key(0), {33, 4}, Received(frame)).status().code(),
            absl::StatusCode::kInvalidArgument);  // not this boundary's shape
  Link plain = MakeLink("none", false);
  auto unsealed = *plain.encoder->Encode(Key(0), Values(), kShape);
  EXPECT_EQ(link.decoder->Decode(Key(0), kShape, Received(unsealed)).status().code(),
            absl::StatusCode::kInvalidArgument);  // encrypted link refuses plaintext
  EXPECT_FALSE(link.encoder->Encode(Key(0), Values(), {4, 32}).ok());  // values vs shape
}

TEST(FrameCodecTest, WrongKeyIsRefused) {
  auto sealer = *crypto::Sealer::Create(TestKey(7), 1 << 30);
  auto encoder = *FrameEncoder::Create("none", std::move(sealer));
  FrameDecoder decoder(*crypto::Opener::Create(TestKey(9)), 1 << 20);
  auto frame = *encoder->Encode(Key(0), Values(), kShape);
  auto result = decoder.Decode(Key(0), kShape, Received(frame));
  EXPECT_FALSE(result.ok());
  EXPECT_TRUE(crypto::GetOpenError(result.status()).has_value()) << result.status();
}

// A teacher's targets cross as opaque bytes (dtype BYTES): sealed like a tensor, bit-exact, and
// never taken for a tensor or the other way round.
TEST(FrameCodecTest, BytesCrossSealedAndAreNeverMistakenForATensor) {
  const std::string targets = std::string("\x01\x00\x02\x00", 4) + "top-k targets";
  v1::TensorKey key = Key(2);
  key.set_purpose(v1::TEACH);
  for (bool encrypted : {true, false}) {
    Link link = MakeLink("none", encrypted);
    auto frame = link.encoder->EncodeBytes(key, targets);
    ASSERT_TRUE(frame.ok()) << frame.status();
    EXPECT_EQ(frame->header.dtype(), v1::BYTES);
    EXPECT_EQ(frame->header.raw_bytes(), targets.size());
    EXPECT_EQ(frame->body.size(), targets.size() + (encrypted ? crypto::kTagSize : 0));
    if (encrypted) {
      EXPECT_EQ(frame->body.find("top-k"), std::string::npos);
    }
    auto back = link.decoder->DecodeBytes(key, Received(*frame));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, targets);
    EXPECT_FALSE(link.decoder->Decode(key, {}, Received(*frame)).ok());
  }
  Link link = MakeLink("none", true);
  auto frame = link.encoder->EncodeBytes(key, targets);
  ASSERT_TRUE(frame.ok());
  ReceivedFrame altered = Received(*frame);
  altered.body[3] ^= 1;
  EXPECT_FALSE(link.decoder->DecodeBytes(key, altered).ok());
  ReceivedFrame relabelled = Received(*frame);
  relabelled.header.set_raw_bytes(targets.size() - 1);  // Bound by the AAD.
  EXPECT_FALSE(link.decoder->DecodeBytes(key, relabelled).ok());
  EXPECT_FALSE(link.decoder->DecodeBytes(Key(3), Received(*frame)).ok());
  auto tensor = link.encoder->Encode(Key(2), Values(), kShape);
  ASSERT_TRUE(tensor.ok());
  EXPECT_FALSE(link.decoder->DecodeBytes(Key(2), Received(*tensor)).ok());
  EXPECT_FALSE(link.encoder->EncodeBytes(key, "").ok());
}

// A link's receiver decodes only the link's agreed chain and "none": a frame of another chain (a
// proj frame with a fresh seed, say, which would make it build a basis) is refused before its
// chain is built. (Unsealed here; a sealed frame is checked the same way once opened.)
TEST(FrameCodecTest, OnlyTheLinksAgreedChainsDecode) {
  auto decoder = *FrameDecoder::ForChains(nullptr, 1 << 20, {"int8+zstd", "none"});
  const std::vector<float> values = Values();
  for (const char* agreed : {"int8+zstd", "none"}) {
    auto frame = (*FrameEncoder::Create(agreed, nullptr))->Encode(Key(0), values, kShape);
    ASSERT_TRUE(frame.ok());
    EXPECT_TRUE(decoder->Decode(Key(0), kShape, Received(*frame)).ok()) << agreed;
  }
  for (const char* other : {"proj:16:99", "bf16", "int4"}) {
    SCOPED_TRACE(other);
    auto sent = (*FrameEncoder::Create(other, nullptr))->Encode(Key(1), values, kShape);
    ASSERT_TRUE(sent.ok());
    absl::StatusOr<std::vector<float>> got = decoder->Decode(Key(1), kShape, Received(*sent));
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(got.status().message().find("this link accepts 'int8:256+zstd:1', 'none'"),
              std::string::npos)
        << got.status();
  }
  auto bf16 = (*FrameEncoder::Create("bf16", nullptr))->Encode(Key(2), values, kShape);
  ASSERT_TRUE(bf16.ok());
  EXPECT_FALSE(
      FrameDecoder::Lossless(nullptr, 1 << 20)->Decode(Key(2), kShape, Received(*bf16)).ok());
  EXPECT_EQ(FrameDecoder::ForChains(nullptr, 1, {"int9"}).status().code(),
            absl::StatusCode::kInvalidArgument);
}
// klt:fisher's sender learns from the gradients the link's backward brings: the backward's decoder
// adds every tensor of the link's chain (rows of the shape's last dimension) under its step (5),
// and no exact one.
TEST(FrameCodecTest, ABackwardDecoderHandsItsGradientsToTheForward) {
  auto gradients = std::make_shared<compression::GradientMoments>();
  auto decoder = *FrameDecoder::ForChains(nullptr, 1 << 20, {"klt:1:sr", "none"}, gradients);
  const std::vector<float> values = Values();
  auto exact = (*FrameEncoder::Create("none", nullptr))->Encode(Key(0), values, kShape);
  ASSERT_TRUE(exact.ok());
  ASSERT_TRUE(decoder->Decode(Key(0), kShape, Received(*exact)).ok());
  EXPECT_TRUE(gradients->Take(33, 6).empty());
  auto coded = (*FrameEncoder::Create("klt:1:sr", nullptr))->Encode(Key(1), values, kShape);
  ASSERT_TRUE(coded.ok());
  absl::StatusOr<std::vector<float>> got = decoder->Decode(Key(1), kShape, Received(*coded));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(gradients->Take(33, 5).empty());  // Steps before 5: none.
  const std::vector<double> moment = gradients->Take(33, 6);
  ASSERT_EQ(moment.size(), 33u * 33u);
  double first = 0;  // The mean of the decoded rows' first value squared.
  for (size_t r = 0; r < 4; ++r) first += double{(*got)[r * 33]} * (*got)[r * 33];
  EXPECT_NEAR(moment[0], first / 4, 1e-4 * (1 + first));
}

// A backend quantizes a tensor where it lives and hands the value stage's payload to the sender
// (FrameEncoder::EncodePayload): the frame is the one Encode makes of the floats, seeds of
// stochastic rounding included. DecodeBoundary leaves such frames as payloads for the receiving
// backend and decodes the rest (topk, proj) to floats, with Decode's checks.
TEST(FrameCodecTest, PayloadFramesAreTheFramesOfTheirFloats) {
  for (const char* chain : {"int8:sr+zstd", "bf16+shuffle+zstd", "int4", "none"}) {
    SCOPED_TRACE(chain);
    Link host = MakeLink(chain, false), device = MakeLink(chain, false);
    ASSERT_NE(device.encoder->device_value_stage(), nullptr);
    for (uint32_t m = 0; m < 3; ++m) {  // Seeds of the link's tensors 0, 1, 2.
      const std::vector<float> values = Values();
      auto frame = host.encoder->Encode(Key(m), values, kShape);
      ASSERT_TRUE(frame.ok()) << frame.status();
      auto boundary = host.decoder->DecodeBoundary(Key(m), kShape, Received(*frame));
      ASSERT_TRUE(boundary.ok()) << boundary.status();
      ASSERT_TRUE(boundary->encoded);
      EXPECT_EQ(boundary->in().stage, &boundary->payload.chain.stages[0]);
      EXPECT_EQ(boundary->payload.element_count, values.size());
      auto again = device.encoder->EncodePayload(Key(m), boundary->payload.value_payload, kShape);
      ASSERT_TRUE(again.ok()) << again.status();
      EXPECT_EQ(again->body, frame->body);
      EXPECT_EQ(again->header.SerializeAsString(), frame->header.SerializeAsString());
    }
  }
  for (const char* chain : {"topk:0.5+zstd", "proj:8+int8:8"}) {
    SCOPED_TRACE(chain);
    Link link = MakeLink(chain, true), twin = MakeLink(chain, true);
    EXPECT_EQ(link.encoder->device_value_stage(), nullptr);
    const std::vector<float> values = Values();
    auto frame = link.encoder->Encode(Key(0), values, kShape);
    ASSERT_TRUE(frame.ok()) << frame.status();
    auto boundary = link.decoder->DecodeBoundary(Key(0), kShape, Received(*frame));
    ASSERT_TRUE(boundary.ok()) << boundary.status();
    EXPECT_FALSE(boundary->encoded);
    EXPECT_EQ(boundary->in().host, boundary->values.data());
    EXPECT_EQ(boundary->values, *twin.decoder->Decode(Key(0), kShape, Received(*frame)));
    EXPECT_EQ(link.encoder->EncodePayload(Key(1), {}, kShape).status().code(),
              absl::StatusCode::kFailedPrecondition);
  }
  Link link = MakeLink("int8+zstd", true);
  auto frame = *link.encoder->Encode(Key(0), Values(), kShape);
  ReceivedFrame cut = Received(frame);
  cut.body.resize(cut.body.size() - 1);
  EXPECT_FALSE(link.decoder->DecodeBoundary(Key(0), kShape, std::move(cut)).ok());
  EXPECT_EQ(link.decoder->DecodeBoundary(Key(0), {33, 4}, Received(frame)).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::TensorKey clip = Key(0);
  clip.set_purpose(v1::CLIP);
  EXPECT_EQ(link.encoder->EncodePayload(clip, {}, {1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strait::site
