#include "core/frame_header.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

namespace strait {
namespace {

// Reassembles what the pieces cover: every byte exactly once, no piece over the limit.
void ExpectCovers(uint64_t wire_bytes, uint64_t chunk_bytes) {
  const FramePieces p = CutIntoPieces(wire_bytes, chunk_bytes);
  SCOPED_TRACE(testing::Message() << wire_bytes << " bytes in pieces of " << chunk_bytes);
  ASSERT_GE(p.count, 1u);
  EXPECT_LE(p.bytes, kMaxChunkBytes);
  EXPECT_LE(p.bytes, std::max<uint64_t>(1, chunk_bytes + chunk_bytes / 64));
  // The last piece holds what the others leave, and is not empty unless the frame is.
  const uint64_t before_last = uint64_t{p.count - 1} * p.bytes;
  ASSERT_LE(before_last, wire_bytes);
  EXPECT_LE(wire_bytes - before_last, p.bytes);
  if (wire_bytes > 0) {
    EXPECT_GT(wire_bytes - before_last, 0u);
  }
}

TEST(CutIntoPiecesTest, ATensorOfExactlyTheChunkSizeWithItsHeaderAndTagGoesInOnePiece) {
  // A 32 x 1024 fp32 activation (128 KiB) sealed: the codec header and the tag add 66 bytes.
  const FramePieces p = CutIntoPieces((128 << 10) + 66, 128 << 10);
  EXPECT_EQ(p.count, 1u);
  EXPECT_EQ(p.bytes, (128u << 10) + 66);
}

TEST(CutIntoPiecesTest, LargerFramesGoInEqualPiecesOfAboutTheChunkSize) {
  EXPECT_EQ(CutIntoPieces(1 << 20, 128 << 10).count, 8u);
  const FramePieces p = CutIntoPieces(300 << 10, 128 << 10);
  EXPECT_EQ(p.count, 3u);
  EXPECT_EQ(p.bytes, 100u << 10);
  // Just over the slack: two pieces.
  EXPECT_EQ(CutIntoPieces((128 << 10) + (2 << 10) + 1, 128 << 10).count, 2u);
}

TEST(CutIntoPiecesTest, NeverExceedsTheProtocolsLargestChunk) {
  const FramePieces p = CutIntoPieces(kMaxChunkBytes + 100, kMaxChunkBytes);
  EXPECT_EQ(p.count, 2u);
  EXPECT_EQ(CutIntoPieces(kMaxChunkBytes + 100, uint64_t{1} << 30).count, 2u);
}

TEST(CutIntoPiecesTest, EveryByteIsInExactlyOnePiece) {
  for (uint64_t chunk : {uint64_t{1}, uint64_t{63}, uint64_t{64}, uint64_t{1000},
                         uint64_t{32} << 10, uint64_t{128} << 10, kMaxChunkBytes}) {
    for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{65}, uint64_t{999}, uint64_t{1001},
                           uint64_t{131138}, uint64_t{5} << 20, (uint64_t{5} << 20) + 7}) {
      ExpectCovers(bytes, chunk);
    }
  }
}

// A teacher's targets are opaque bytes: the gateway takes dtype BYTES (one byte an element) on
// TEACH frames only.
TEST(ValidateFrameHeaderTest, BytesOnlyOnTeachFrames) {
  JobSpec spec;
  spec.name = "fed";
  spec.sites.resize(2);
  spec.training.microbatches = 4;
  spec.has_teacher = true;
  spec.teacher.sites.resize(1);
  v1::FrameHeader header;
  v1::TensorKey& key = *header.mutable_key();
  key.set_job("fed");
  key.set_direction(v1::FORWARD);
  key.set_purpose(v1::TEACH);
  header.set_dtype(v1::BYTES);
  header.add_shape(100);
  header.set_raw_bytes(100);
  header.set_wire_bytes(116);
  header.set_chunk_count(1);
  EXPECT_TRUE(ValidateFrameHeader(header, spec, 1 << 20).ok());
  header.set_raw_bytes(400);  // As if the elements were floats.
  EXPECT_FALSE(ValidateFrameHeader(header, spec, 1 << 20).ok());
  header.set_raw_bytes(100);
  key.set_purpose(v1::TRAIN);
  const absl::Status train = ValidateFrameHeader(header, spec, 1 << 20);
  EXPECT_EQ(train.message(),
            "frame header has dtype 2; expected FLOAT32 (BYTES: TEACH frames only)");
}

}  // namespace
}  // namespace strait
