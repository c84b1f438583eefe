// Decode never crashes on malformed frames: truncations, bit flips, lying headers.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "compression/codec_chain.h"
#include "tests/unit/compression/test_tensors.h"

namespace strait::compression {
namespace {

std::vector<uint8_t> Frame(const char* spec, const std::vector<float>& v) {
  auto chain = *CodecChain::Create(spec);
  absl::Span<const uint8_t> frame = *chain->Encode(v, {v.size()});
  return {frame.begin(), frame.end()};
}

const char* const kChains[] = {"none",          "fp16",          "bf16+shuffle+zstd",
                               "int8",          "int4:4+zstd:3", "topk:0.2",
                               "topk:0.2+zstd", "shuffle",       "int8:sr+shuffle+zstd",
                               "klt:0.3",       "klt:1:sr",      "klt:0.3:fisher",
                               "klt:1:dither"};

TEST(HostileFrameTest, EveryTruncationIsAnError) {
  TensorDecoder decoder;
  DecodedTensor out;
  for (const char* spec : kChains) {
    std::vector<uint8_t> frame = Frame(spec, testing::Normal(37, 1));
    ASSERT_TRUE(decoder.Decode(frame, &out).ok()) << spec;
    for (size_t len = 0; len < frame.size(); ++len) {
      std::vector<uint8_t> cut(frame.begin(), frame.begin() + len);  // exact-size heap copy
      EXPECT_FALSE(decoder.Decode(cut, &out).ok()) << spec << " len=" << len;
    }
    frame.push_back(0);
    EXPECT_FALSE(decoder.Decode(frame, &out).ok()) << spec << " trailing byte";
  }
}

TEST(HostileFrameTest, BitFlipsNeverCrash) {
  TensorDecoder decoder;
  DecodedTensor out;
  std::mt19937 rng(1);
  for (const char* spec : kChains) {
    const std::vector<uint8_t> frame = Frame(spec, testing::Normal(61, 2));
    for (size_t i = 0; i < frame.size(); ++i) {
      for (int bit = 0; bit < 8; ++bit) {
        std::vector<uint8_t> bad = frame;
        bad[i] ^= static_cast<uint8_t>(1 << bit);
        (void)decoder.Decode(bad, &out);  // any Status; ASan/UBSan catch the rest
      }
      std::vector<uint8_t> bad = frame;
      bad[i] = static_cast<uint8_t>(rng());
      (void)decoder.Decode(bad, &out);
    }
  }
}

void Put64(std::vector<uint8_t>& frame, size_t at, uint64_t v) { std::memcpy(&frame[at], &v, 8); }

TEST(HostileFrameTest, LyingHeadersAreRejected) {
  TensorDecoder decoder;
  DecodedTensor out;
  std::vector<uint8_t> frame = Frame("topk:0.5", testing::Normal(8, 3));
  // Layout: 16 fixed + 8 dims + 18 per stage; stage sizes at 16 + 8 + 10.
  const size_t dims = 16, stage = 24, payload = 42;
  ASSERT_TRUE(decoder.Decode(frame, &out).ok());

  auto expect_error = [&](std::vector<uint8_t> bad, absl::StatusCode code, const char* what) {
    absl::Status status = decoder.Decode(bad, &out);
    EXPECT_EQ(status.code(), code) << what << ": " << status;
  };
  auto bad = frame;
  bad[0] = 'X';
  expect_error(bad, absl::StatusCode::kInvalidArgument, "magic");
  bad = frame;
  bad[4] = 2;
  expect_error(bad, absl::StatusCode::kInvalidArgument, "version");
  bad = frame;
  bad[5] = 2;
  expect_error(bad, absl::StatusCode::kInvalidArgument, "dtype");
  bad = frame;
  Put64(bad, dims, uint64_t{1} << 40);  // shape says 2^40 elements
  Put64(bad, 8, uint64_t{1} << 42);
  expect_error(bad, absl::StatusCode::kResourceExhausted, "huge tensor");
  bad = frame;
  Put64(bad, dims, uint64_t{1} << 62);
  Put64(bad, 8, 0);
  expect_error(bad, absl::StatusCode::kInvalidArgument, "overflowing shape");
  bad = frame;
  Put64(bad, 8, 36);
  expect_error(bad, absl::StatusCode::kInvalidArgument, "raw size vs shape");
  bad = frame;
  bad[stage] = 9;
  expect_error(bad, absl::StatusCode::kInvalidArgument, "stage kind");
  bad = frame;
  bad[stage + 1] = 1;  // sr on topk
  expect_error(bad, absl::StatusCode::kInvalidArgument, "flags");
  bad = frame;
  Put64(bad, stage + 2, 0);  // topk fraction 0
  expect_error(bad, absl::StatusCode::kInvalidArgument, "fraction");
  bad = frame;
  Put64(bad, payload, 9);  // k > n
  expect_error(bad, absl::StatusCode::kInvalidArgument, "count");
  bad = frame;
  bad.back() = 0x80;  // last varint unterminated
  expect_error(bad, absl::StatusCode::kInvalidArgument, "varint");
  bad = frame;
  bad.back() = 100;  // index past the end
  expect_error(bad, absl::StatusCode::kInvalidArgument, "index");

  // A quantized frame with a NaN scale.
  std::vector<uint8_t> q = Frame("int8", testing::Normal(8, 3));
  const float nan = NAN;
  std::memcpy(&q[payload], &nan, 4);
  expect_error(q, absl::StatusCode::kInvalidArgument, "scale");
  // A zstd frame whose payload is not zstd, and one that decompresses to the wrong size.
  std::vector<uint8_t> z = Frame("zstd", testing::Normal(100, 3));
  for (size_t i = payload; i < z.size(); ++i) z[i] = static_cast<uint8_t>(i);
  expect_error(z, absl::StatusCode::kInvalidArgument, "zstd garbage");
  std::vector<uint8_t> shorter = Frame("zstd", testing::Normal(99, 3));
  Put64(shorter, dims, 100);
  Put64(shorter, 8, 400);
  expect_error(shorter, absl::StatusCode::kInvalidArgument, "zstd size");
}

// A header's size for an inner stage is checked before a buffer is sized to it, also when decoding
// stops before the value stage (found by fuzzing: DecodeValuePayload allocated first).
TEST(HostileFrameTest, LyingInnerStageSizeAllocatesNothing) {
  std::vector<uint8_t> frame = Frame("int8+zstd", testing::Normal(100, 4));
  const size_t int8_size = 16 + 8 + 10;  // one dim, the first stage record's encoded size
  Put64(frame, int8_size, uint64_t{1} << 41);
  TensorDecoder decoder;
  DecodedPayload payload;
  EXPECT_EQ(decoder.DecodeValuePayload(frame, &payload).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(payload.value_payload.capacity(), size_t{1} << 20);
  DecodedTensor out;
  EXPECT_EQ(decoder.Decode(frame, &out).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strait::compression
