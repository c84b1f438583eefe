#include "gateway/mailbox/stored_frame.h"

#include <gtest/gtest.h>

#include "test_frames.h"

namespace strait::gateway {
namespace {

using testing::ArrivingFrame;
using testing::Key;

TEST(StoredFrameTest, ChunksAreReadableAsTheyArrive) {
  auto frame = ArrivingFrame(Key(1, 0, 0, v1::FORWARD), 3);
  EXPECT_EQ(frame->available(), 0u);
  frame->AddChunk("first");
  const std::string& first = frame->chunk(0);
  EXPECT_EQ(frame->available(), 1u);
  EXPECT_FALSE(frame->complete());
  frame->AddChunk("second");
  frame->AddChunk("third");
  EXPECT_TRUE(frame->complete());
  EXPECT_EQ(first, "first");  // adding chunks never moves the ones being read
  EXPECT_EQ(frame->chunk(2), "third");
  frame->AddChunk("fourth");  // beyond chunk_count: ignored
  EXPECT_EQ(frame->available(), 3u);
  frame->BreakOff();  // a complete frame stays complete
  EXPECT_FALSE(frame->broken());
}

TEST(StoredFrameTest, AReaderWaitingForAChunkIsCalledWhenItArrivesOrTheFrameBreaks) {
  auto frame = ArrivingFrame(Key(1, 0, 0, v1::FORWARD), 3);
  frame->AddChunk("a");
  int called = 0;
  EXPECT_TRUE(frame->WhenAvailable(0, [&] { ++called; }));  // there: not called
  EXPECT_FALSE(frame->WhenAvailable(1, [&] { ++called; }));
  EXPECT_FALSE(frame->WhenAvailable(2, [&] { called += 10; }));
  frame->AddChunk("b");
  EXPECT_EQ(called, 1);  // only the reader of chunk 1
  frame->BreakOff();
  EXPECT_EQ(called, 11);
  EXPECT_TRUE(frame->broken());
  EXPECT_TRUE(frame->WhenAvailable(2, [&] { called += 100; }));  // broken: answered at once
  frame->AddChunk("c");                                          // a broken frame never grows
  EXPECT_EQ(frame->available(), 2u);
  EXPECT_FALSE(frame->complete());
  EXPECT_EQ(called, 11);
}

TEST(StoredFrameTest, AWakenReaderMayReadTheFrame) {
  auto frame = ArrivingFrame(Key(1, 0, 0, v1::FORWARD), 2);
  std::string seen;
  EXPECT_FALSE(frame->WhenAvailable(0, [&] { seen = frame->chunk(0); }));  // no self-deadlock
  frame->AddChunk("x");
  EXPECT_EQ(seen, "x");
}

}  // namespace
}  // namespace strait::gateway
