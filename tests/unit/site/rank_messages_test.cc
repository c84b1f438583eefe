// The leader's orders and the ranks' answers as messages: round trips, and decoding refuses what
// does not fit (an unknown call, bytes that are not whole floats, an error carried back).
#include "site/daemon/rank_messages.h"

#include <gtest/gtest.h>

#include <chrono>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace strait::site {
namespace {

TEST(RankMessagesTest, ACallRoundTrips) {
  RankCall call{.op = RankOp::kForward,
                .step = 7,
                .microbatch = 2,
                .rows = 5,
                .training = false,
                .wants_output = true,
                .weights = 3,
                .layer_weights = {3, 2},
                .scale = 0.25f};
  call.values = {1.5f, -2.0f, 0.0f};
  call.labels = {4, 1};
  absl::StatusOr<RankCall> back = FromOrder(ToOrder(call));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->op, RankOp::kForward);
  EXPECT_EQ(back->step, 7);
  EXPECT_EQ(back->rows, 5);
  EXPECT_FALSE(back->training);
  EXPECT_TRUE(back->wants_output);
  EXPECT_EQ(back->layer_weights, call.layer_weights);
  EXPECT_EQ(back->values, call.values);
  EXPECT_EQ(back->labels, call.labels);
  EXPECT_EQ(back->scale, 0.25f);
}

TEST(RankMessagesTest, DecodingRefusesWhatDoesNotFit) {
  v1::RankCallOrder order = ToOrder({});
  order.set_op(999);
  EXPECT_EQ(FromOrder(order).status().code(), absl::StatusCode::kInvalidArgument);
  order = ToOrder({});
  order.set_values("abcde");  // 5 bytes: not whole floats
  EXPECT_EQ(FromOrder(order).status().code(), absl::StatusCode::kInvalidArgument);
  v1::RankAnswer answer = ToAnswer(RankResult{});
  answer.add_loss_sums(1.0);  // no accuracy beside it
  EXPECT_EQ(FromAnswer(answer).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RankMessagesTest, AnswersCarryResultsAndErrors) {
  RankResult result{.values = {3.0f}, .sum = 4.5, .losses = {{1.25, 2}}};
  absl::StatusOr<RankResult> back = FromAnswer(ToAnswer(result));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->values, result.values);
  ASSERT_EQ(back->losses.size(), 1u);
  EXPECT_EQ(back->losses[0].loss_sum, 1.25);
  EXPECT_EQ(back->losses[0].correct, 2);
  EXPECT_EQ(back->sum, 4.5);
  const absl::Status error = absl::FailedPreconditionError("out of turn");
  EXPECT_EQ(FromAnswer(ToAnswer(error)).status(), error);
  v1::RankAnswer odd;
  odd.set_code(12345);  // not a status code: unknown
  EXPECT_EQ(AnswerStatus(odd).code(), absl::StatusCode::kUnknown);
}

// A group order's timeout outside 1 to 3600 s is the leader's mistake: the follower refuses it with
// the value instead of forming its group with another timeout than the leader's.
TEST(RankMessagesTest, AGroupTimeoutOutOfRangeIsRefusedWithItsValue) {
  EXPECT_EQ(*GroupTimeout(2.5), std::chrono::milliseconds(2500));
  EXPECT_EQ(*GroupTimeout(1), std::chrono::seconds(1));
  EXPECT_EQ(*GroupTimeout(3600), std::chrono::hours(1));
  for (const auto& [timeout_s, shown] : std::vector<std::pair<double, std::string>>{
           {0.5, "0.5"},
           {0, "0"},
           {-2, "-2"},
           {7200, "7200"},
           {std::numeric_limits<double>::infinity(), "inf"},
           {std::numeric_limits<double>::quiet_NaN(), "nan"}}) {
    const absl::Status refused = GroupTimeout(timeout_s).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << shown;
    EXPECT_EQ(refused.message(), "a site's group timeout must be 1 to 3600 s, got " + shown + " s");
  }
}

}  // namespace
}  // namespace strait::site
