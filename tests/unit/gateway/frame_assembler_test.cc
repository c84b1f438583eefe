#include "gateway/mailbox/frame_assembler.h"

#include <gtest/gtest.h>

#include "core/frame_header.h"
#include "test_frames.h"

namespace strait::gateway {
namespace {

using testing::Header;
using testing::Key;

v1::PushChunk Chunk(uint64_t transfer, uint32_t index, std::string data,
                    const v1::FrameHeader* header = nullptr) {
  v1::PushChunk chunk;
  chunk.set_transfer_id(transfer);
  chunk.mutable_chunk()->set_index(index);
  chunk.mutable_chunk()->set_data(std::move(data));
  if (header != nullptr) *chunk.mutable_header() = *header;
  return chunk;
}

// The chunks a reader can see now.
std::vector<std::string> Chunks(const StoredFrame& frame) {
  std::vector<std::string> chunks;
  for (uint32_t i = 0; i < frame.available(); ++i) chunks.push_back(frame.chunk(i));
  return chunks;
}

class FrameAssemblerTest : public ::testing::Test {
 protected:
  JobSpec spec_ = testing::ThreeSiteSpec();
  FrameAssembler assembler_{spec_, 64 << 20};
  std::shared_ptr<StoredFrame> dropped_;
};

TEST_F(FrameAssemblerTest, AssemblesChunksInOrderVisibleAsTheyArrive) {
  v1::FrameHeader header = Header(Key(1, 0, 0, v1::FORWARD), 7, 3);
  auto e0 = assembler_.Add(Chunk(9, 0, "abc", &header), &dropped_);
  ASSERT_TRUE(e0.ok()) << e0.status();
  EXPECT_TRUE(e0->started);
  EXPECT_FALSE(e0->completed);
  EXPECT_EQ(e0->frame->wire_bytes(), 7u);
  EXPECT_EQ(Chunks(*e0->frame), (std::vector<std::string>{"abc"}));  // before the rest arrives
  EXPECT_FALSE(e0->frame->complete());
  EXPECT_EQ(assembler_.open_transfers(), 1u);
  auto e1 = assembler_.Add(Chunk(9, 1, "de"), &dropped_);
  ASSERT_TRUE(e1.ok());
  EXPECT_EQ(e1->frame, e0->frame);  // one frame, growing
  auto e2 = assembler_.Add(Chunk(9, 2, "fg"), &dropped_);
  ASSERT_TRUE(e2.ok()) << e2.status();
  EXPECT_TRUE(e2->completed);
  EXPECT_TRUE(e2->frame->complete());
  EXPECT_EQ(Chunks(*e2->frame), (std::vector<std::string>{"abc", "de", "fg"}));
  EXPECT_EQ(assembler_.open_transfers(), 0u);
}

TEST_F(FrameAssemblerTest, OneChunkFrameStartsAndCompletes) {
  v1::FrameHeader header = Header(Key(1, 0, 0, v1::FORWARD), 4, 1);
  auto e = assembler_.Add(Chunk(1, 0, "wxyz", &header), &dropped_);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->started && e->completed);
  EXPECT_TRUE(e->frame->complete());
}

TEST_F(FrameAssemblerTest, InterleavedTransfersStaySeparate) {
  v1::FrameHeader a = Header(Key(1, 0, 0, v1::FORWARD), 2, 2);
  v1::FrameHeader b = Header(Key(1, 1, 0, v1::FORWARD), 2, 2);
  ASSERT_TRUE(assembler_.Add(Chunk(1, 0, "a", &a), &dropped_).ok());
  ASSERT_TRUE(assembler_.Add(Chunk(2, 0, "b", &b), &dropped_).ok());
  auto eb = assembler_.Add(Chunk(2, 1, "B"), &dropped_);
  auto ea = assembler_.Add(Chunk(1, 1, "A"), &dropped_);
  ASSERT_TRUE(ea.ok() && eb.ok());
  EXPECT_EQ(Chunks(*ea->frame), (std::vector<std::string>{"a", "A"}));
  EXPECT_EQ(Chunks(*eb->frame), (std::vector<std::string>{"b", "B"}));
}

struct BadCase {
  const char* name;
  std::vector<v1::PushChunk> chunks;  // the last one must fail
  const char* reason;
  bool dropped;  // a transfer started by an earlier chunk is handed back
};

TEST_F(FrameAssemblerTest, RejectsMalformedSequencesAndReportsWhatToRelease) {
  v1::FrameHeader ok2 = Header(Key(1, 0, 0, v1::FORWARD), 10, 2);
  v1::FrameHeader bad_dtype = ok2;
  bad_dtype.set_dtype(v1::DTYPE_UNSPECIFIED);
  v1::FrameHeader bad_raw = ok2;
  bad_raw.set_raw_bytes(25);
  v1::FrameHeader bad_chunks = ok2;
  bad_chunks.set_chunk_count(0);
  v1::FrameHeader huge = Header(Key(1, 0, 0, v1::FORWARD), uint64_t{1} << 40, 1 << 20);
  v1::FrameHeader bad_boundary = Header(Key(1, 0, 5, v1::FORWARD), 10, 1);
  const std::string oversize(kMaxChunkBytes + 1, 'x');
  const std::vector<BadCase> cases = {
      {"no header", {Chunk(1, 0, "x")}, "first chunk has no header", false},
      {"chunk before start", {Chunk(1, 1, "x")}, "chunk 1 before chunk 0", false},
      {"bad dtype", {Chunk(1, 0, "x", &bad_dtype)}, "dtype", false},
      {"raw bytes mismatch", {Chunk(1, 0, "x", &bad_raw)}, "raw_bytes 25", false},
      {"zero chunks", {Chunk(1, 0, "x", &bad_chunks)}, "chunk_count 0", false},
      {"frame over limit", {Chunk(1, 0, "x", &huge)}, "exceeds the limit", false},
      {"unknown boundary", {Chunk(1, 0, "x", &bad_boundary)}, "boundary 5", false},
      {"oversize chunk", {Chunk(1, 0, oversize, &ok2)}, "at most 1048576", false},
      {"skipped chunk", {Chunk(1, 0, "abc", &ok2), Chunk(1, 2, "x")}, "expected chunk 1", true},
      {"started twice", {Chunk(1, 0, "abc", &ok2), Chunk(1, 0, "x", &ok2)}, "started twice", true},
      {"header on later chunk",
       {Chunk(1, 0, "abc", &ok2), Chunk(1, 1, "x", &ok2)},
       "only the first chunk",
       true},
      // Started and broken by the same chunk: nothing was reserved for it yet.
      {"too many bytes", {Chunk(1, 0, "abcdefghijk", &ok2)}, "more than its 10", false},
      {"too few bytes", {Chunk(1, 0, "abc", &ok2), Chunk(1, 1, "de")}, "ended after 5 of 10", true},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    FrameAssembler assembler(spec_, 64 << 20);
    for (size_t i = 0; i + 1 < c.chunks.size(); ++i)
      ASSERT_TRUE(assembler.Add(c.chunks[i], &dropped_).ok());
    auto result = assembler.Add(c.chunks.back(), &dropped_);
    ASSERT_FALSE(result.ok());
    EXPECT_NE(result.status().message().find(c.reason), absl::string_view::npos) << result.status();
    EXPECT_EQ(dropped_ != nullptr, c.dropped);
    if (dropped_ != nullptr) {
      EXPECT_TRUE(dropped_->broken());  // its readers stop waiting
      // The last chunk of "too few bytes" never joins the frame: no reader sees a short frame
      // whole.
      EXPECT_FALSE(dropped_->complete());
    }
    EXPECT_EQ(assembler.open_transfers(), 0u);  // the broken transfer is gone
  }
}

TEST_F(FrameAssemblerTest, BoundsIncompleteTransfers) {
  FrameAssembler assembler(spec_, 64 << 20, /*max_open_transfers=*/2);
  v1::FrameHeader header = Header(Key(1, 0, 0, v1::FORWARD), 10, 2);
  ASSERT_TRUE(assembler.Add(Chunk(1, 0, "a", &header), &dropped_).ok());
  ASSERT_TRUE(assembler.Add(Chunk(2, 0, "a", &header), &dropped_).ok());
  auto third = assembler.Add(Chunk(3, 0, "a", &header), &dropped_);
  EXPECT_FALSE(third.ok());
  std::shared_ptr<StoredFrame> first = assembler.Drop(1);
  ASSERT_NE(first, nullptr);
  EXPECT_TRUE(first->broken());
  EXPECT_EQ(assembler.Drop(1), nullptr);
  EXPECT_EQ(assembler.open_transfers(), 1u);
  std::vector<std::shared_ptr<StoredFrame>> rest = assembler.DropAll();
  ASSERT_EQ(rest.size(), 1u);
  EXPECT_TRUE(rest[0]->broken());
  EXPECT_EQ(assembler.open_transfers(), 0u);
}

}  // namespace
}  // namespace strait::gateway
