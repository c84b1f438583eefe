// Secure aggregation at the gateway (gateway/aggregate/secure_sum.h) with the replicas' masks
// (crypto/pairwise_masks.h): the gateway's sum of masked vectors is the plain sum of the
// fixed-point vectors, bit for bit; what does not belong to a round is refused and counted; a
// failed replica aborts its stage's open rounds.
#include "gateway/aggregate/secure_sum.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "crypto/pairwise_masks.h"

namespace strait::gateway {
namespace {

struct Answers {
  std::vector<absl::StatusOr<std::vector<uint32_t>>> got;
  SecureSum::Done Collect() {
    return [this](absl::StatusOr<std::vector<uint32_t>> a) { got.push_back(std::move(a)); };
  }
};

TEST(SecureSumTest, TheGatewaySumsMaskedVectorsToThePlainSum) {
  const std::vector<std::string> ids = {"dc-a", "dc-c", "dc-e"};
  std::vector<crypto::EphemeralKey> keys;
  std::vector<crypto::LinkEnd> ends;
  for (const std::string& id : ids) {
    absl::StatusOr<crypto::EphemeralKey> key = crypto::EphemeralKey::Generate();
    ASSERT_TRUE(key.ok());
    ends.push_back({.site_id = id, .epoch = 1, .public_key = key->public_key()});
    keys.push_back(*std::move(key));
  }
  SecureSum sum({{"dc-b", "dc-d"}, ids});
  const SumRound round{.stage = 1, .step = 20, .generation = 3};
  const size_t n = 1000;
  std::vector<uint32_t> plain(n, 0);
  std::vector<Answers> answers(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<float> values(n);
    for (size_t k = 0; k < n; ++k) values[k] = 0.001f * static_cast<float>(k) - 0.3f * i;
    std::vector<uint32_t> words(n);
    crypto::ToFixedPoint(values, 1 << 16, INT32_MAX / 3, words);
    for (size_t k = 0; k < n; ++k) plain[k] += words[k];
    std::vector<crypto::LinkEnd> peers;
    for (size_t j = 0; j < ids.size(); ++j) {
      if (j != i) peers.push_back(ends[j]);
    }
    ASSERT_TRUE(crypto::AddPairwiseMasks("fed", "stage 1 step 20 generation 3", ends[i], keys[i],
                                         peers, words)
                    .ok());
    ASSERT_TRUE(sum.Add(ids[i], round, words, answers[i].Collect()).ok());
    EXPECT_EQ(answers[0].got.size(), i + 1 == ids.size() ? 1u : 0u);  // Only once all are in.
  }
  for (const Answers& a : answers) {
    ASSERT_EQ(a.got.size(), 1u);
    ASSERT_TRUE(a.got[0].ok());
    EXPECT_EQ(*a.got[0], plain);
  }
}

TEST(SecureSumTest, RefusesWhatIsNotTheRoundsAndCountsIt) {
  SecureSum sum(std::vector<std::vector<std::string>>{{"a", "b"}});
  Answers answers;
  const SumRound round{.stage = 0, .step = 5, .generation = 2};
  EXPECT_EQ(sum.Add("x", round, {1, 2}, answers.Collect()).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(
      sum.Add("a", {.stage = 1, .step = 5, .generation = 2}, {1, 2}, answers.Collect()).code(),
      absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(sum.Add("a", round, {1, 2}, answers.Collect()).ok());
  EXPECT_EQ(sum.Add("a", round, {1, 2}, answers.Collect()).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(sum.Add("b", round, {1, 2, 3}, answers.Collect()).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(sum.Add("b", round, {3, 0xffffffffu}, answers.Collect()).ok());
  ASSERT_EQ(answers.got.size(), 2u);
  EXPECT_EQ(*answers.got[0], (std::vector<uint32_t>{4, 1}));  // mod 2^32
  // A replayed round, and one of a generation rolled back.
  EXPECT_EQ(sum.Add("a", round, {1, 2}, answers.Collect()).code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(
      sum.Add("a", {.stage = 0, .step = 5, .generation = 3}, {1, 2}, answers.Collect()).ok());
  EXPECT_EQ(sum.Add("b", round, {1, 2}, answers.Collect()).code(),
            absl::StatusCode::kFailedPrecondition);
  const std::map<std::string, uint64_t> refused = sum.Refused();
  EXPECT_EQ(refused.at("PERMISSION_DENIED"), 2u);
  EXPECT_EQ(refused.at("ALREADY_EXISTS"), 2u);
  EXPECT_EQ(refused.at("INVALID_ARGUMENT"), 1u);
  EXPECT_EQ(refused.at("FAILED_PRECONDITION"), 1u);
}

TEST(SecureSumTest, AFailedReplicaAbortsItsStagesOpenRounds) {
  SecureSum sum({{"a", "b"}, {"c", "d"}});
  Answers first, second;
  ASSERT_TRUE(sum.Add("a", {.stage = 0, .step = 1, .generation = 1}, {1}, first.Collect()).ok());
  ASSERT_TRUE(sum.Add("c", {.stage = 1, .step = 1, .generation = 1}, {1}, second.Collect()).ok());
  sum.Abort("b", "its stream ended");
  ASSERT_EQ(first.got.size(), 1u);
  EXPECT_EQ(first.got[0].status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(second.got.empty());  // Another stage's round goes on.
  // A new generation ends what was open before it.
  ASSERT_TRUE(sum.Add("a", {.stage = 0, .step = 1, .generation = 2}, {1}, first.Collect()).ok());
  ASSERT_EQ(second.got.size(), 1u);
  EXPECT_EQ(second.got[0].status().code(), absl::StatusCode::kAborted);
}

TEST(SecureSumTest, NarrowLanesAddWithoutCarriesAndMustAgree) {
  SecureSum sum(std::vector<std::vector<std::string>>{{"a", "b"}});
  const SumRound round{.stage = 0, .step = 1, .generation = 1};
  std::vector<uint32_t> got;
  auto keep = [&got](absl::StatusOr<std::vector<uint32_t>> s) {
    if (s.ok()) got = *s;
  };
  // 16-bit lanes: 0xffff + 0x0002 = 0x0001 in the low lane, nothing carried into the high one.
  ASSERT_TRUE(sum.Add("a", round, {0x0001ffffu}, keep, /*lanes=*/2).ok());
  EXPECT_EQ(sum.Add("b", round, {1u}, keep, /*lanes=*/4).code(),
            absl::StatusCode::kInvalidArgument);  // Another packing than a's.
  EXPECT_EQ(sum.Add("b", round, {1u}, keep, /*lanes=*/3).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(sum.Add("b", round, {0x00020002u}, keep, /*lanes=*/2).ok());
  EXPECT_EQ(got, (std::vector<uint32_t>{0x00030001u}));

  // 4-bit lanes: each nibble mod 16 (0xf + 0x2 = 0x1, 0x8 + 0x8 = 0x0), none carried.
  const SumRound next{.stage = 0, .step = 2, .generation = 1};
  ASSERT_TRUE(sum.Add("a", next, {0x8f8f8f8fu}, keep, /*lanes=*/8).ok());
  ASSERT_TRUE(sum.Add("b", next, {0x82828282u}, keep, /*lanes=*/8).ok());
  EXPECT_EQ(got, (std::vector<uint32_t>{0x01010101u}));
}

}  // namespace
}  // namespace strait::gateway
