// The teacher's top-k targets (site/nn/teacher_targets.h) and their wire form
// (site/exchange/teacher_targets_codec.h): the right entries and probabilities, what survives the
// trip in fp16 and int8, the bytes against fp32 logits, and a decoder that refuses every kind of
// damage with an error instead of a crash.
#include "site/nn/teacher_targets.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "site/exchange/teacher_targets_codec.h"

namespace strait::site {
namespace {

std::vector<float> RandomLogits(int64_t rows, int classes, uint32_t seed) {
  std::mt19937 random(seed);
  std::normal_distribution<float> normal(0, 3);
  std::vector<float> logits(rows * classes);
  for (float& z : logits) z = normal(random);
  return logits;
}

TEST(TeacherTargetsTest, TheTopKOfTheTemperedSoftmaxLargestFirst) {
  const std::vector<float> logits = {1, 3, 2, 3, -1};  // Tie at 3: the lower index first.
  absl::StatusOr<TeacherTargets> t = TopKTargets(logits, 1, 5, 2.0, 3);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->indices, (std::vector<int32_t>{1, 3, 2}));
  double sum = 0;
  for (float z : logits) sum += std::exp(z / 2.0);
  EXPECT_NEAR(t->probabilities[0], std::exp(1.5) / sum, 1e-6);
  EXPECT_NEAR(t->probabilities[2], std::exp(1.0) / sum, 1e-6);
  EXPECT_FALSE(TopKTargets(logits, 1, 5, 2.0, 6).ok());
  EXPECT_FALSE(TopKTargets(logits, 1, 5, 0.0, 2).ok());
  EXPECT_FALSE(TopKTargets(logits, 2, 5, 1.0, 2).ok());
}

TEST(TeacherTargetsTest, Fp16AndInt8KeepTheIndicesAndTheProbabilitiesClose) {
  const int64_t rows = 64;
  const int classes = 256;
  absl::StatusOr<TeacherTargets> t =
      TopKTargets(RandomLogits(rows, classes, 1), rows, classes, 2.0, 16);
  ASSERT_TRUE(t.ok());
  for (auto [values, tolerance] :
       {std::pair{TeacherValues::kFp16, 1e-3}, std::pair{TeacherValues::kInt8, 0.035}}) {
    absl::StatusOr<TeacherTargets> back = AsReceived(*t, values, classes);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->indices, t->indices);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int i = 0; i < t->k; ++i) {
        const float p = t->probabilities[r * t->k + i], q = back->probabilities[r * t->k + i];
        EXPECT_NEAR(q, p, tolerance * p + 1e-6) << ToString(values) << " row " << r;
        sum += q;
      }
      EXPECT_LE(sum, 1.0 + 1e-6);
    }
  }
}

// Per target, fp32 logits cost 4 x classes bytes; the top 16 cost 16 indices of 2 bytes and 16
// values of 2 (fp16) or 1 (int8) bytes, plus 2 bytes of row scale for int8.
TEST(TeacherTargetsTest, TheTopSixteenOfAByteVocabularyCrossInAtLeastEightTimesFewerBytes) {
  const int64_t rows = 8 * 128;  // A microbatch of 8 windows of 128 tokens.
  const int classes = 256;
  absl::StatusOr<TeacherTargets> t =
      TopKTargets(RandomLogits(rows, classes, 2), rows, classes, 1.0, 16);
  ASSERT_TRUE(t.ok());
  const double logits_bytes = 4.0 * rows * classes;
  const size_t fp16 = EncodeTeacherTargets(*t, TeacherValues::kFp16, classes).size();
  const size_t int8 = EncodeTeacherTargets(*t, TeacherValues::kInt8, classes).size();
  EXPECT_EQ(fp16, 10 + rows * 64u);
  EXPECT_EQ(int8, 10 + rows * 50u);
  EXPECT_GE(logits_bytes / fp16, 8.0);
  EXPECT_GE(logits_bytes / int8, 8.0);
}

TEST(TeacherTargetsTest, TheDecoderRefusesDamageWithAnError) {
  const int classes = 300;
  absl::StatusOr<TeacherTargets> t = TopKTargets(RandomLogits(4, classes, 3), 4, classes, 1.0, 5);
  ASSERT_TRUE(t.ok());
  const std::string good = EncodeTeacherTargets(*t, TeacherValues::kFp16, classes);
  ASSERT_TRUE(DecodeTeacherTargets(good, 4, classes).ok());
  auto refused = [&](std::string bytes, int64_t rows, int cls, const std::string& says) {
    absl::StatusOr<TeacherTargets> r = DecodeTeacherTargets(bytes, rows, cls);
    ASSERT_FALSE(r.ok()) << says;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(std::string(r.status().message()).find(says), std::string::npos) << r.status();
  };
  refused(good.substr(0, 5), 4, classes, "shorter than the header");
  refused(good.substr(0, good.size() - 1), 4, classes, "bytes, expected");
  refused(good + "x", 4, classes, "bytes, expected");
  refused(good, 3, classes, "4 rows, expected 3");
  std::string bad = good;
  bad[0] = 2;
  refused(bad, 4, classes, "version 2");
  bad = good;
  bad[1] = 7;
  refused(bad, 4, classes, "value kind 7");
  bad = good;
  bad[8] = 0, bad[9] = 0;
  refused(bad, 4, classes, "top 0 of 300");
  bad = good;
  bad[10] = static_cast<char>(0xff), bad[11] = static_cast<char>(0xff);  // Index 65535.
  refused(bad, 4, classes, "index 65535 (300 classes)");
  bad = good;
  bad[12] = bad[10], bad[13] = bad[11];  // Row 0's second index repeats its first.
  refused(bad, 4, classes, "repeated");
  bad = good;
  bad[10 + 5 * 2] = 0, bad[10 + 5 * 2 + 1] = static_cast<char>(0x7c);  // fp16 infinity.
  refused(bad, 4, classes, "probability inf");
  refused(good, 4, 70000, "indices of 2 bytes for 70000 classes");
}

}  // namespace
}  // namespace strait::site
