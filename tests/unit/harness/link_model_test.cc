// The arithmetic of one direction of an emulated link, on made-up times.
#include "harness/wan/link_model.h"

#include <gtest/gtest.h>

namespace strait::harness {
namespace {

using Clock = DirectionModel::Clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;

LinkProfile Profile(double rate, milliseconds delay) {
  LinkProfile p;
  p.name = "custom";
  p.rate_bits_per_second = rate;
  p.one_way_delay = delay;
  return p;
}

TEST(LinkModelTest, SerializesAtTheRateThenAddsTheDelay) {
  const Clock::time_point t0 = Clock::now();
  DirectionModel m(Profile(8e6, milliseconds(20)), 1, t0);  // 1 byte per microsecond.
  EXPECT_EQ(m.Send(1000, t0), t0 + milliseconds(21));
  EXPECT_EQ(m.Send(1000, t0), t0 + milliseconds(22));  // Queued behind the first.
  // After the link went idle a piece starts at its arrival.
  EXPECT_EQ(m.Send(500, t0 + milliseconds(100)), t0 + milliseconds(120) + microseconds(500));
}

TEST(LinkModelTest, UnlimitedRateOnlyDelays) {
  const Clock::time_point t0 = Clock::now();
  DirectionModel m(Profile(0, milliseconds(5)), 1, t0);
  EXPECT_EQ(m.Send(64 << 20, t0), t0 + milliseconds(5));
  EXPECT_EQ(m.WaitForRoom(t0).count(), 0);
  EXPECT_EQ(m.max_held_bytes(), size_t{64} << 20);
}

TEST(LinkModelTest, BufferBoundsWhatWaitsForTheBottleneck) {
  const Clock::time_point t0 = Clock::now();
  DirectionModel slow(Profile(8e6, milliseconds(0)), 1, t0);
  EXPECT_EQ(slow.buffer_bytes(), size_t{256} << 10);  // max(256 KiB, 2 x 1 MB/s x 10 ms)
  slow.Send(200 << 10, t0);
  EXPECT_EQ(slow.WaitForRoom(t0).count(), 0);
  slow.Send(112 << 10, t0);  // 312 KiB queued: 56 KiB (57.344 ms at 1 byte/us) over the buffer.
  EXPECT_EQ(slow.WaitForRoom(t0), microseconds(57344));
  EXPECT_EQ(slow.WaitForRoom(t0 + microseconds(57344)).count(), 0);

  DirectionModel fast(Profile(10e9, milliseconds(1)), 1, t0);
  EXPECT_EQ(fast.buffer_bytes(), size_t{25'000'000});  // 2 x 1.25 GB/s x 10 ms
  EXPECT_GE(fast.max_held_bytes(), fast.buffer_bytes() + 1'250'000);
}

TEST(LinkModelTest, JitterStaysWithinItsBound) {
  const Clock::time_point t0 = Clock::now();
  LinkProfile p = Profile(0, milliseconds(10));
  p.jitter = milliseconds(5);
  DirectionModel m(p, 7, t0);
  Clock::duration low = Clock::duration::max(), high = Clock::duration::min();
  for (int i = 0; i < 10000; ++i) {
    const Clock::duration d = m.Send(100, t0) - t0;
    low = std::min(low, d);
    high = std::max(high, d);
  }
  EXPECT_GE(low, milliseconds(10));
  EXPECT_LT(low, milliseconds(10) + microseconds(50));
  EXPECT_LE(high, milliseconds(15));
  EXPECT_GT(high, milliseconds(15) - microseconds(50));
}

TEST(LinkModelTest, LossBurstsHoldPiecesUntilTheBurstEnds) {
  const Clock::time_point t0 = Clock::now();
  LinkProfile p = Profile(0, milliseconds(10));
  p.loss_burst = {milliseconds(100), milliseconds(20)};
  DirectionModel m(p, 3, t0);
  int held = 0;
  const int pieces = 100000;  // One every 100 us for 10 s: about 100 bursts.
  for (int i = 0; i < pieces; ++i) {
    const Clock::time_point sent = t0 + microseconds(100) * i;
    const Clock::duration late = m.Send(100, sent) - sent - milliseconds(10);
    ASSERT_GE(late.count(), 0);
    ASSERT_LE(late, milliseconds(20));
    if (late.count() > 0) ++held;
  }
  // Bursts of 20 ms about every 100 ms cover roughly a sixth to a fifth of the time.
  EXPECT_GT(held, pieces / 10);
  EXPECT_LT(held, pieces / 3);
}

}  // namespace
}  // namespace strait::harness
