#include "crypto/replay_window.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace strait::crypto {
namespace {

using Verdict = ReplayWindow::Verdict;

TEST(ReplayWindowTest, AcceptsEachNumberOnce) {
  ReplayWindow window(64);
  for (uint64_t s = 0; s < 200; ++s) {
    ASSERT_EQ(window.Check(s), Verdict::kFresh) << s;
    window.Accept(s);
    EXPECT_EQ(window.Check(s), Verdict::kReplayed) << s;
  }
}

TEST(ReplayWindowTest, ToleratesReorderingInsideTheWindow) {
  ReplayWindow window(64);
  window.Accept(100);
  EXPECT_EQ(window.Check(37), Verdict::kFresh);   // 100 - 37 = 63 < 64
  EXPECT_EQ(window.Check(36), Verdict::kTooOld);  // 64 below: out of the window
  window.Accept(37);
  EXPECT_EQ(window.Check(37), Verdict::kReplayed);
  EXPECT_EQ(window.Check(99), Verdict::kFresh);
}

TEST(ReplayWindowTest, SizeRoundsUpToWords) {
  EXPECT_EQ(ReplayWindow(1).size(), 64u);
  EXPECT_EQ(ReplayWindow(65).size(), 128u);
  EXPECT_EQ(ReplayWindow(1024).size(), 1024u);
}

TEST(ReplayWindowTest, BigJumpForgetsEverything) {
  ReplayWindow window(128);
  for (uint64_t s = 0; s < 10; ++s) window.Accept(s);
  window.Accept(1000000);
  EXPECT_EQ(window.Check(5), Verdict::kTooOld);
  EXPECT_EQ(window.Check(1000000 - 127), Verdict::kFresh);
  EXPECT_EQ(window.Check(1000000), Verdict::kReplayed);
}

// Against a reference model (a set of everything accepted) on random reordered traffic.
TEST(ReplayWindowTest, MatchesReferenceModel) {
  std::mt19937_64 rng(7);
  ReplayWindow window(256);
  std::set<uint64_t> seen;
  uint64_t highest = 0;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t s = highest + (rng() % 400) - std::min<uint64_t>(highest, 300);
    Verdict expected = Verdict::kFresh;
    if (!seen.empty() && s <= highest) {
      if (highest - s >= 256)
        expected = Verdict::kTooOld;
      else if (seen.count(s))
        expected = Verdict::kReplayed;
    }
    ASSERT_EQ(window.Check(s), expected) << "i=" << i << " s=" << s << " highest=" << highest;
    if (expected == Verdict::kFresh) {
      window.Accept(s);
      seen.insert(s);
      highest = std::max(highest, s);
    }
  }
}

}  // namespace
}  // namespace strait::crypto
