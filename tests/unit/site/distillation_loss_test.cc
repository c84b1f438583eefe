// The distillation loss (site/nn/distillation_loss.h): its gradient against central finite
// differences, its two limits (alpha 1: the labels' cross-entropy; a teacher equal to the student:
// no soft term) and its refusals.
#include "site/nn/distillation_loss.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace strait::site {
namespace {

const std::vector<float> kLogits = {0.3f, -1.2f, 2.0f, 0.7f, -0.4f, 1.1f, 0.0f};
const std::vector<int32_t> kTop = {2, 5, 3};
const std::vector<float> kTopP = {0.55f, 0.2f, 0.1f};

double Loss(std::vector<float> z, const DistillTerms& terms) {
  std::vector<float> grad(z.size());
  absl::StatusOr<DistillationResult> r =
      DistillationLoss(z, 3, {kTop, kTopP}, terms, absl::MakeSpan(grad));
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? r->loss : NAN;
}

TEST(DistillationLossTest, GradientMatchesFiniteDifferences) {
  for (const DistillTerms terms : {DistillTerms{0.5f, 2.0f}, DistillTerms{0.0f, 1.0f},
                                   DistillTerms{0.9f, 4.0f}, DistillTerms{0.3f, 0.5f}}) {
    std::vector<float> grad(kLogits.size());
    ASSERT_TRUE(DistillationLoss(kLogits, 3, {kTop, kTopP}, terms, absl::MakeSpan(grad)).ok());
    for (size_t j = 0; j < kLogits.size(); ++j) {
      const float h = 1e-2f;
      std::vector<float> up = kLogits, down = kLogits;
      up[j] += h;
      down[j] -= h;
      const double numeric = (Loss(up, terms) - Loss(down, terms)) / (up[j] - down[j]);
      EXPECT_NEAR(grad[j], numeric, 2e-4 + 1e-3 * std::abs(numeric))
          << "logit " << j << ", alpha " << terms.alpha << ", tau " << terms.temperature;
    }
  }
}

TEST(DistillationLossTest, AlphaOneIsTheLabelsCrossEntropy) {
  std::vector<float> grad(kLogits.size());
  const absl::StatusOr<DistillationResult> loss =
      DistillationLoss(kLogits, 3, {kTop, kTopP}, {1.0f, 2.0f}, absl::MakeSpan(grad));
  ASSERT_TRUE(loss.ok());
  EXPECT_EQ(loss->loss, loss->cross_entropy);
  double sum = 0;
  for (float z : kLogits) sum += std::exp(static_cast<double>(z));
  EXPECT_NEAR(loss->loss, -(kLogits[3] - std::log(sum)), 1e-9);
  EXPECT_NEAR(grad[3], std::exp(static_cast<double>(kLogits[3])) / sum - 1, 1e-6);
}

TEST(DistillationLossTest, ATeacherThatAgreesWithTheStudentAddsNothing) {
  // The teacher's tempered distribution is the student's own: KL 0, soft gradient 0.
  const float tau = 2.0f;
  double sum = 0;
  for (float z : kLogits) sum += std::exp(static_cast<double>(z) / tau);
  std::vector<int32_t> top;
  std::vector<float> p;
  for (int32_t j = 0; j < 4; ++j) {
    top.push_back(j);
    p.push_back(static_cast<float>(std::exp(static_cast<double>(kLogits[j]) / tau) / sum));
  }
  std::vector<float> alone(kLogits.size()), taught(kLogits.size());
  const absl::StatusOr<DistillationResult> a =
      DistillationLoss(kLogits, 3, {top, p}, {1.0f, tau}, absl::MakeSpan(alone));
  const absl::StatusOr<DistillationResult> b =
      DistillationLoss(kLogits, 3, {top, p}, {0.5f, tau}, absl::MakeSpan(taught));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NEAR(b->loss, 0.5 * a->loss, 1e-6);
  EXPECT_EQ(b->cross_entropy, a->cross_entropy);
  for (size_t j = 0; j < kLogits.size(); ++j) EXPECT_NEAR(taught[j], 0.5f * alone[j], 1e-6);
}

TEST(DistillationLossTest, RefusesWhatCannotBeATeachersAnswer) {
  std::vector<float> grad(kLogits.size());
  const std::vector<int32_t> repeated = {2, 2}, outside = {2, 7};
  const std::vector<float> two = {0.3f, 0.3f}, too_much = {0.7f, 0.6f};
  const auto refused = [&](int32_t label, const TeacherTopK& t, DistillTerms terms) {
    return !DistillationLoss(kLogits, label, t, terms, absl::MakeSpan(grad)).ok();
  };
  EXPECT_TRUE(refused(3, {repeated, two}, {}));
  EXPECT_TRUE(refused(3, {outside, two}, {}));
  EXPECT_TRUE(refused(3, {kTop, too_much}, {}));              // Sizes differ.
  EXPECT_TRUE(refused(3, {{kTop.data(), 2}, too_much}, {}));  // Sums past 1.
  EXPECT_TRUE(refused(7, {kTop, kTopP}, {}));
  EXPECT_TRUE(refused(3, {kTop, kTopP}, {1.5f, 1.0f}));
  EXPECT_TRUE(refused(3, {kTop, kTopP}, {0.5f, 0.0f}));
  EXPECT_FALSE(refused(3, {kTop, kTopP}, {}));
}

}  // namespace
}  // namespace strait::site
