#include "gateway/membership/authorizer.h"

#include <gtest/gtest.h>

#include "test_frames.h"

namespace strait::gateway {
namespace {

using testing::Key;

TEST(AuthorizerTest, SitesPushWhatTheyProduceAndPullWhatTheyConsume) {
  JobSpec spec = testing::ThreeSiteSpec();
  // Boundary 1 joins b (stage 1) and c (stage 2).
  EXPECT_TRUE(CheckPush(spec, 1, Key(0, 0, 1, v1::FORWARD)).ok());
  EXPECT_TRUE(CheckPull(spec, 2, Key(0, 0, 1, v1::FORWARD)).ok());
  EXPECT_TRUE(CheckPush(spec, 2, Key(0, 0, 1, v1::BACKWARD)).ok());
  EXPECT_TRUE(CheckPull(spec, 1, Key(0, 0, 1, v1::BACKWARD)).ok());
}

TEST(AuthorizerTest, WrongProducerOrConsumerIsDeniedWithBothNames) {
  JobSpec spec = testing::ThreeSiteSpec();
  absl::Status s = CheckPush(spec, 0, Key(0, 0, 1, v1::FORWARD));
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(s.message(), "site 'a' may not push fed/s0/m0/b1/fwd/g0: its producer is 'b'");
  EXPECT_EQ(CheckPull(spec, 1, Key(0, 0, 1, v1::FORWARD)).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckPull(spec, 0, Key(0, 0, 1, v1::BACKWARD)).code(),
            absl::StatusCode::kPermissionDenied);
}

// A teacher site pushes its TEACH frames and nothing else: no key that could carry weights or
// gradients has a teacher slot at either end.
TEST(AuthorizerTest, ATeacherSitePushesItsTargetsToTheStudentsLastSiteOnly) {
  JobSpec spec = testing::ThreeSiteSpec();
  spec.has_teacher = true;
  spec.teacher.sites = {SiteSpec{.id = "teacher"}};
  ASSERT_EQ(*SlotOfSite(spec, "teacher"), 3);
  v1::TensorKey targets = Key(0, 0, 0, v1::FORWARD);
  targets.set_purpose(v1::TEACH);
  EXPECT_TRUE(CheckPush(spec, 3, targets).ok());
  EXPECT_TRUE(CheckPull(spec, 2, targets).ok());
  EXPECT_EQ(CheckPull(spec, 1, targets).message(),
            "site 'b' may not pull fed/s0/m0/b0/fwd/g0/teach: its consumer is 'c'");
  EXPECT_EQ(CheckPush(spec, 2, targets).code(), absl::StatusCode::kPermissionDenied);
  // The pace (core/teach_links.h): the student's last site to the teacher, and nobody else.
  v1::TensorKey pace = Key(0, 0, 0, v1::BACKWARD);
  pace.set_purpose(v1::TEACH);
  EXPECT_TRUE(CheckPush(spec, 2, pace).ok());
  EXPECT_TRUE(CheckPull(spec, 3, pace).ok());
  EXPECT_EQ(CheckPush(spec, 3, pace).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckPush(spec, 1, pace).code(), absl::StatusCode::kPermissionDenied);
  for (v1::Purpose purpose : {v1::TRAIN, v1::CLIP, v1::EVAL, v1::MOVE}) {
    v1::TensorKey other = Key(0, 0, 0, v1::FORWARD);
    other.set_purpose(purpose);
    EXPECT_FALSE(CheckPush(spec, 3, other).ok()) << purpose;
    EXPECT_FALSE(CheckPull(spec, 3, other).ok()) << purpose;
  }
}

// Tied embeddings: the first and the last stage swap the shared matrix's gradients; the stage
// between them may neither push nor pull those frames.
TEST(AuthorizerTest, TiedFramesJoinTheFirstAndTheLastSiteOnly) {
  JobSpec spec = testing::ThreeSiteSpec();
  spec.model.family = ModelFamily::kGpt;
  spec.model.gpt.tie_embeddings = true;
  v1::TensorKey forward = Key(0, 0, 0, v1::FORWARD), backward = Key(0, 0, 0, v1::BACKWARD);
  forward.set_purpose(v1::TIED);
  backward.set_purpose(v1::TIED);
  EXPECT_TRUE(CheckPush(spec, 0, forward).ok());
  EXPECT_TRUE(CheckPull(spec, 2, forward).ok());
  EXPECT_TRUE(CheckPush(spec, 2, backward).ok());
  EXPECT_TRUE(CheckPull(spec, 0, backward).ok());
  EXPECT_EQ(CheckPull(spec, 1, forward).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(CheckPush(spec, 1, backward).code(), absl::StatusCode::kPermissionDenied);
  spec.model.gpt.tie_embeddings = false;  // A job that ties nothing has no such frames.
  EXPECT_EQ(CheckPush(spec, 0, forward).code(), absl::StatusCode::kInvalidArgument);
}

TEST(AuthorizerTest, MalformedKeysAreInvalidNotDenied) {
  JobSpec spec = testing::ThreeSiteSpec();
  EXPECT_EQ(CheckPush(spec, 0, Key(0, 0, 7, v1::FORWARD)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckPush(spec, 0, Key(0, 9, 0, v1::FORWARD)).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(AuthorizerTest, UnknownSiteIsDenied) {
  JobSpec spec = testing::ThreeSiteSpec();
  EXPECT_EQ(*SlotOfSite(spec, "c"), 2);
  EXPECT_EQ(SlotOfSite(spec, "mallory").status().code(), absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace strait::gateway
