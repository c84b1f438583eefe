// Teacher sites as members of a federation (knowledge sharing, docs/distillation.md): the gateway
// waits for them before training starts, but only the student's checkpoints decide the step it
// starts from; a teacher site and the student's last site get each other's link keys; a teacher
// must claim the teacher's layers.
#include <gtest/gtest.h>

#include "core/join_request.h"
#include "fake_channel.h"
#include "gateway/membership/federation.h"
#include "gateway/membership/member_roles.h"

namespace strait::gateway {
namespace {

JobSpec TaughtSpec() {
  JobSpec spec;
  spec.name = "taught";
  spec.model.family = ModelFamily::kGpt;
  spec.model.gpt = GptSpec{.vocab = 256, .context = 16, .dim = 32, .depth = 2, .heads = 4};
  spec.sites = {SiteSpec{.id = "a", .layers = {0, 2}}, SiteSpec{.id = "b", .layers = {2, 4}}};
  spec.links.resize(1);
  spec.has_teacher = true;
  spec.teacher.model = spec.model;
  spec.teacher.model.gpt.dim = 64;
  spec.teacher.sites = {SiteSpec{.id = "t", .layers = {0, 4}}};
  return spec;
}

std::optional<uint64_t> RollbackStep(testing::FakeChannel& channel) {
  for (const v1::GatewayMessage& m : channel.messages()) {
    if (m.control().has_rollback()) return m.control().rollback().step();
  }
  return std::nullopt;
}

TEST(TeacherMembershipTest, TrainingWaitsForTheTeacherAndResumesFromTheStudentsCheckpoint) {
  const JobSpec spec = TaughtSpec();
  Federation fed(spec, JobView::Initial(spec));
  const auto now = Federation::Clock::now();
  std::vector<std::shared_ptr<testing::FakeChannel>> channels;
  for (int stage = 0; stage < 2; ++stage) {
    v1::JoinRequest join = JoinRequestFor(spec, stage, UnsignedKey(spec.sites[stage].id, 7));
    join.set_has_checkpoint(true);
    join.set_checkpoint_step(40);
    ASSERT_TRUE(fed.Join(spec.sites[stage].id, join, now).ok());
    channels.push_back(std::make_shared<testing::FakeChannel>());
    ASSERT_TRUE(fed.Attach(spec.sites[stage].id, 7, channels.back(), now).ok());
  }
  EXPECT_FALSE(RollbackStep(*channels[0]));  // The teacher has not joined.
  absl::StatusOr<v1::JoinReply> teacher =
      fed.Join("t", TeacherJoinRequest(spec, 0, UnsignedKey("t", 7)), now);
  ASSERT_TRUE(teacher.ok()) << teacher.status();
  ASSERT_EQ(teacher->neighbour_keys_size(), 1);  // The student's last site's.
  EXPECT_EQ(teacher->neighbour_keys(0).site_id(), "b");
  channels.push_back(std::make_shared<testing::FakeChannel>());
  absl::StatusOr<int> slot = fed.Attach("t", 7, channels.back(), now);
  ASSERT_TRUE(slot.ok()) << slot.status();
  EXPECT_EQ(*slot, 2);
  // A teacher has no checkpoint: the federation starts from the student's, step 40, everywhere.
  for (auto& channel : channels) EXPECT_EQ(RollbackStep(*channel), 40u);
  const v1::FederationState state = fed.Snapshot({}, now);
  ASSERT_EQ(state.view().sites_size(), 3);
  EXPECT_TRUE(state.view().sites(2).teacher());
  EXPECT_EQ(state.view().sites(2).layers().end(), 4u);
  EXPECT_EQ(state.view().common_checkpoint_step(), 40u);
}

TEST(TeacherMembershipTest, ATeacherAndTheStudentsLastSiteHoldEachOthersKeys) {
  JobSpec spec = TaughtSpec();
  EXPECT_EQ(KeyPartners(spec, 2), (std::vector<int>{1}));
  EXPECT_EQ(KeyPartners(spec, 1), (std::vector<int>{0, 2}));
  EXPECT_EQ(KeyPartners(spec, 0), (std::vector<int>{1}));
  spec.teacher.sites = {SiteSpec{.id = "t0", .layers = {0, 2}},
                        SiteSpec{.id = "t1", .layers = {2, 4}}};
  // The first teacher stage and the student's last site: the pace (core/teach_links.h).
  EXPECT_EQ(KeyPartners(spec, 2), (std::vector<int>{3, 1}));
  EXPECT_EQ(KeyPartners(spec, 3), (std::vector<int>{2, 1}));
  EXPECT_EQ(KeyPartners(spec, 1), (std::vector<int>{0, 3, 2}));
}

TEST(TeacherMembershipTest, ATeacherMustClaimTheTeachersLayers) {
  const JobSpec spec = TaughtSpec();
  Federation fed(spec, JobView::Initial(spec));
  v1::JoinRequest join = TeacherJoinRequest(spec, 0, UnsignedKey("t", 7));
  join.mutable_layers()->set_end(2);
  absl::StatusOr<v1::JoinReply> reply = fed.Join("t", join, Federation::Clock::now());
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(std::string(reply.status().message()).find("the job spec says [0, 4)"),
            std::string::npos)
      << reply.status();
  EXPECT_FALSE(
      fed.Join("u", TeacherJoinRequest(spec, 0, UnsignedKey("u", 7)), Federation::Clock::now())
          .ok());
}

}  // namespace
}  // namespace strait::gateway
