// The outer rounds' schedule (site/pipeline/outer_schedule.h) and their checkpoint form
// (site/pipeline/outer_state.h).
#include "site/pipeline/outer_state.h"

#include <gtest/gtest.h>

#include <bit>
#include <set>
#include <vector>

#include "site/exchange/masked_sum.h"
#include "site/pipeline/outer_schedule.h"

namespace strait::site {
namespace {

TEST(OuterScheduleTest, FragmentsCoverEveryValueOnceInWholeBlocks) {
  for (size_t n : {size_t{1}, size_t{256}, size_t{1000}, size_t{963456}}) {
    for (int fragments : {1, 3, 4, 16}) {
      size_t next = 0;
      for (int p = 0; p < fragments; ++p) {
        const ValueRange r = FragmentRange(n, fragments, p);
        EXPECT_EQ(r.begin, next) << n << " " << fragments << " " << p;
        EXPECT_TRUE(r.begin % kSumBlock == 0 || r.begin == n);
        next = r.end;
      }
      EXPECT_EQ(next, n);
    }
  }
  EXPECT_EQ(FragmentRange(1000, 4, 1).begin, 256u);  // 4 blocks, one a fragment.
  EXPECT_EQ(FragmentRange(1000, 4, 3).end, 1000u);
}

// Every fragment once per `every` steps, at most one a step, at the same offsets on every replica.
TEST(OuterScheduleTest, EachFragmentIsDueOnceEveryPeriodAtItsOwnOffset) {
  for (const auto& [every, fragments] : {std::pair{16, 16}, {20, 1}, {20, 3}, {7, 7}}) {
    std::vector<int> count(fragments, 0);
    std::set<int64_t> steps;
    for (int64_t s = 1; s <= 10 * every; ++s) {
      if (std::optional<int> p = FragmentDue(s, every, fragments)) {
        ++count[*p];
        EXPECT_TRUE(steps.insert(s).second);
      }
    }
    for (int c : count) EXPECT_EQ(c, 10) << every << " " << fragments;
  }
  EXPECT_EQ(FragmentDue(20, 20, 1), 0);  // One fragment: today's rounds.
  EXPECT_EQ(FragmentDue(19, 20, 1), std::nullopt);
  EXPECT_EQ(FragmentDue(0, 20, 1), std::nullopt);
}

OuterState Sample(size_t n, int fragments) {
  OuterState s;
  for (size_t i = 0; i < n; ++i) {
    s.momentum.push_back(0.5f * i);
    s.residual.push_back(-1.0f * i);
    s.last_mean.push_back(0.25f * i);
    s.start.push_back(2.0f * i);
  }
  s.synced.assign(fragments, 0);
  s.synced[0] = 1;
  const ValueRange r = FragmentRange(n, fragments, 1);
  s.pending.push_back({.sent_at = (int64_t{1} << 33) + 5,
                       .fragment = 1,
                       .sent = std::vector<float>(r.size(), 3.0f),
                       .local_at_send = std::vector<float>(r.size(), 4.0f)});
  return s;
}

TEST(OuterStateTest, RoundTripsWithRoundsPending) {
  const OuterState s = Sample(1000, 4);
  absl::StatusOr<OuterState> back = ParseOuterState(SerializeOuterState(s), 1000, 4);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->momentum, s.momentum);
  EXPECT_EQ(back->residual, s.residual);
  EXPECT_EQ(back->last_mean, s.last_mean);
  EXPECT_EQ(back->start, s.start);
  EXPECT_EQ(back->synced, s.synced);
  ASSERT_EQ(back->pending.size(), 1u);
  EXPECT_EQ(back->pending[0].sent_at, s.pending[0].sent_at);
  EXPECT_EQ(back->pending[0].fragment, 1);
  EXPECT_EQ(back->pending[0].sent, s.pending[0].sent);
  EXPECT_EQ(back->pending[0].local_at_send, s.pending[0].local_at_send);
}

// Checkpoints of earlier releases: momentum and error feedback, then the last mean after a round.
TEST(OuterStateTest, ReadsVersionOne) {
  std::vector<float> v1(3 * 4, 1.0f);
  absl::StatusOr<OuterState> s = ParseOuterState(v1, 4, 1);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->start.empty());
  EXPECT_EQ(s->synced, std::vector<uint8_t>{1});
  s = ParseOuterState(std::vector<float>(8, 0.0f), 4, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->synced, std::vector<uint8_t>{0});
  EXPECT_EQ(s->last_mean, std::vector<float>(4, 0.0f));
}

TEST(OuterStateTest, RefusesWhatDoesNotFit) {
  const std::vector<float> good = SerializeOuterState(Sample(1000, 4));
  EXPECT_FALSE(ParseOuterState(good, 999, 4).ok());   // Another stage.
  EXPECT_FALSE(ParseOuterState(good, 1000, 3).ok());  // Another layout.
  for (size_t cut : {size_t{1}, size_t{5}, good.size() / 2, good.size() - 1}) {
    EXPECT_FALSE(ParseOuterState(std::span(good).first(cut), 1000, 4).ok()) << cut;
  }
  std::vector<float> longer = good;
  longer.push_back(0.0f);
  EXPECT_FALSE(ParseOuterState(longer, 1000, 4).ok());
  std::vector<float> bad_fragment = good;
  // The pending round's fragment word: after the header (6 words), 4n floats, 4 flags, its step.
  bad_fragment[6 + 4 * 1000 + 4 + 2] = std::bit_cast<float>(uint32_t{9});
  EXPECT_FALSE(ParseOuterState(bad_fragment, 1000, 4).ok());
  EXPECT_FALSE(ParseOuterState(std::vector<float>(7, 0.0f), 4, 1).ok());
}

}  // namespace
}  // namespace strait::site
