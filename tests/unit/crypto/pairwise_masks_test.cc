// Secure aggregation's masks (crypto/pairwise_masks.h): the masks of a stage's replicas cancel, so
// the sum of masked vectors is the sum of the fixed-point vectors bit for bit; one masked vector
// tells nothing of its vector; every round has masks of its own.
#include "crypto/pairwise_masks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace strait::crypto {
namespace {

struct Replica {
  EphemeralKey key;
  LinkEnd end;
};

std::vector<Replica> Replicas(int n) {
  std::vector<Replica> out;
  for (int i = 0; i < n; ++i) {
    // Fixed private keys: the masks are the same on every run (a known answer below).
    std::vector<uint8_t> secret(32, static_cast<uint8_t>(0x40 + i));
    absl::StatusOr<EphemeralKey> key = EphemeralKey::FromPrivateKey(secret);
    EXPECT_TRUE(key.ok());
    LinkEnd end{.site_id = "dc-" + std::string(1, static_cast<char>('a' + i)),
                .epoch = static_cast<uint32_t>(7 + i),
                .public_key = key->public_key()};
    out.push_back({*std::move(key), end});
  }
  return out;
}

std::vector<LinkEnd> PeersOf(const std::vector<Replica>& all, size_t self) {
  std::vector<LinkEnd> peers;
  for (size_t j = 0; j < all.size(); ++j) {
    if (j != self) peers.push_back(all[j].end);
  }
  return peers;
}

// Replica i's vector: n values in [-1, 1).
std::vector<float> Vector(size_t i, size_t n) {
  std::vector<float> v(n);
  uint32_t x = 2463534242u + static_cast<uint32_t>(i);
  for (float& f : v) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    f = static_cast<float>(x) / 2147483648.0f - 1.0f;
  }
  return v;
}

TEST(PairwiseMasksTest, TheMasksCancelAndTheSumIsExact) {
  const std::vector<Replica> replicas = Replicas(3);
  const size_t n = 10007;  // Not a multiple of the stream's blocks.
  const double scale = 1 << 20;
  const int32_t bound = INT32_MAX / 3;
  std::vector<uint32_t> plain(n, 0), masked_sum(n, 0);
  for (size_t i = 0; i < replicas.size(); ++i) {
    std::vector<uint32_t> words(n);
    EXPECT_EQ(ToFixedPoint(Vector(i, n), scale, bound, words), 0);
    for (size_t k = 0; k < n; ++k) plain[k] += words[k];
    const std::vector<LinkEnd> peers = PeersOf(replicas, i);
    ASSERT_TRUE(AddPairwiseMasks("fed", "stage 1 step 20 generation 2", replicas[i].end,
                                 replicas[i].key, peers, words)
                    .ok());
    for (size_t k = 0; k < n; ++k) masked_sum[k] += words[k];
  }
  EXPECT_EQ(masked_sum, plain);
  // The sum back in floats is the float sum up to the fixed point's resolution.
  std::vector<float> sum(n);
  FromFixedPoint(masked_sum, scale, sum);
  for (size_t k = 0; k < n; ++k) {
    const float expected = Vector(0, n)[k] + Vector(1, n)[k] + Vector(2, n)[k];
    ASSERT_NEAR(sum[k], expected, 2.0 / scale) << k;
  }
}

// What the gateway receives from one replica: uniform words, uncorrelated with the vector. A
// replica whose vector is all zeros sends its mask alone, and that looks the same.
TEST(PairwiseMasksTest, OneMaskedVectorTellsNothing) {
  const std::vector<Replica> replicas = Replicas(2);
  const size_t n = 200000;
  std::vector<uint32_t> words(n);
  ToFixedPoint(Vector(0, n), 1 << 20, INT32_MAX / 2, words);
  const std::vector<uint32_t> clear = words;
  ASSERT_TRUE(AddPairwiseMasks("fed", "round", replicas[0].end, replicas[0].key,
                               PeersOf(replicas, 0), words)
                  .ok());
  // Pearson correlation of the masked words with the fixed-point values (both as signed).
  double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
  int64_t top_bits = 0;
  for (size_t k = 0; k < n; ++k) {
    const double x = static_cast<int32_t>(clear[k]), y = static_cast<int32_t>(words[k]);
    sx += x, sy += y, sxx += x * x, syy += y * y, sxy += x * y;
    top_bits += words[k] >> 31;
  }
  const double cov = sxy / n - (sx / n) * (sy / n);
  const double r = cov / std::sqrt((sxx / n - sx * sx / n / n) * (syy / n - sy * sy / n / n));
  EXPECT_LT(std::abs(r), 0.01) << r;  // 4.5 standard deviations of r at n = 200000.
  EXPECT_NEAR(static_cast<double>(top_bits) / n, 0.5, 0.01);
}

TEST(PairwiseMasksTest, EveryRoundHasMasksOfItsOwn) {
  const std::vector<Replica> replicas = Replicas(2);
  auto mask = [&](const std::string& round, size_t who) {
    std::vector<uint32_t> words(8, 0);
    EXPECT_TRUE(AddPairwiseMasks("fed", round, replicas[who].end, replicas[who].key,
                                 PeersOf(replicas, who), words)
                    .ok());
    return words;
  };
  EXPECT_EQ(mask("step 1", 0), mask("step 1", 0));  // Deterministic...
  EXPECT_NE(mask("step 1", 0), mask("step 2", 0));  // ...per round,
  std::vector<uint32_t> a = mask("step 1", 0), b = mask("step 1", 1);
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k] + b[k], 0u);  // and opposite per pair.
  // A known answer (this derivation's, 2026-11-27): a change to it would make replicas of builds
  // before and after disagree.
  EXPECT_EQ(a[0], 429292544u);
  EXPECT_EQ(a[1], 853399276u);
}

TEST(PairwiseMasksTest, RefusesARepeatedReplica) {
  const std::vector<Replica> replicas = Replicas(2);
  std::vector<uint32_t> words(4);
  const std::vector<LinkEnd> twice = {replicas[1].end, replicas[1].end};
  EXPECT_FALSE(AddPairwiseMasks("fed", "r", replicas[0].end, replicas[0].key, twice, words).ok());
  const std::vector<LinkEnd> self = {replicas[0].end};
  EXPECT_FALSE(AddPairwiseMasks("fed", "r", replicas[0].end, replicas[0].key, self, words).ok());
}

TEST(PairwiseMasksTest, FixedPointRoundsClampsAndWraps) {
  std::vector<uint32_t> words(5);
  EXPECT_EQ(ToFixedPoint(std::vector<float>{1.5f, -1.5f, 1e9f, -1e9f, NAN}, 2.0, 100, words), 3);
  EXPECT_EQ(words, (std::vector<uint32_t>{3, 0u - 3, 100, 0u - 100, 0}));
  std::vector<float> back(5);
  FromFixedPoint(words, 2.0, back);
  EXPECT_EQ(back, (std::vector<float>{1.5f, -1.5f, 50.0f, -50.0f, 0.0f}));
}

}  // namespace
}  // namespace strait::crypto
