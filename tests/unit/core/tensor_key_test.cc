#include "core/tensor_key.h"

#include <gtest/gtest.h>

namespace strait {
namespace {

JobSpec ThreeSites() {
  JobSpec spec;
  spec.name = "fed";
  spec.sites.resize(3);
  spec.training.microbatches = 4;
  return spec;
}

v1::TensorKey Key(uint32_t boundary, v1::Direction direction, uint32_t microbatch = 0) {
  v1::TensorKey key;
  key.set_job("fed");
  key.set_step(12);
  key.set_microbatch(microbatch);
  key.set_boundary(boundary);
  key.set_direction(direction);
  return key;
}

TEST(TensorKeyTest, ProducerAndConsumer) {
  EXPECT_EQ(ProducerStage(Key(1, v1::FORWARD), 3), 1);
  EXPECT_EQ(ConsumerStage(Key(1, v1::FORWARD), 3), 2);
  EXPECT_EQ(ProducerStage(Key(1, v1::BACKWARD), 3), 2);
  EXPECT_EQ(ConsumerStage(Key(1, v1::BACKWARD), 3), 1);
}

TEST(TensorKeyTest, TiedKeysJoinTheFirstAndTheLastStage) {
  v1::TensorKey forward = Key(0, v1::FORWARD), backward = Key(0, v1::BACKWARD);
  forward.set_purpose(v1::TIED);
  backward.set_purpose(v1::TIED);
  EXPECT_EQ(ProducerStage(forward, 4), 0);
  EXPECT_EQ(ConsumerStage(forward, 4), 3);
  EXPECT_EQ(ProducerStage(backward, 4), 3);
  EXPECT_EQ(ConsumerStage(backward, 4), 0);
  EXPECT_EQ(TensorKeyToString(forward), "fed/s12/m0/b0/fwd/g0/tied");

  JobSpec spec = ThreeSites();
  spec.model.family = ModelFamily::kGpt;
  EXPECT_FALSE(ValidateTensorKey(forward, spec).ok());  // the job does not tie them
  spec.model.gpt.tie_embeddings = true;
  EXPECT_TRUE(ValidateTensorKey(forward, spec).ok());
  v1::TensorKey elsewhere = forward;
  elsewhere.set_boundary(1);
  EXPECT_FALSE(ValidateTensorKey(elsewhere, spec).ok());
  elsewhere = forward;
  elsewhere.set_microbatch(1);
  EXPECT_FALSE(ValidateTensorKey(elsewhere, spec).ok());
}

// Layers that move after a re-plan go from stage `boundary` to stage `microbatch`, any two.
TEST(TensorKeyTest, MoveKeysJoinAnyTwoStagesOfAPlannedSplit) {
  v1::TensorKey move = Key(2, v1::FORWARD, 0);
  move.set_purpose(v1::MOVE);
  EXPECT_EQ(ProducerStage(move, 3), 2);
  EXPECT_EQ(ConsumerStage(move, 3), 0);
  EXPECT_EQ(TensorKeyToString(move), "fed/s12/m0/b2/fwd/g0/move");
  JobSpec spec = ThreeSites();
  EXPECT_FALSE(ValidateTensorKey(move, spec).ok());           // The split is written in the spec.
  for (SiteSpec& site : spec.sites) site.plan_layers = true;  // layers: auto, planned.
  EXPECT_TRUE(ValidateTensorKey(move, spec).ok());
  for (auto [from, to] : {std::pair{2, 2}, std::pair{3, 0}, std::pair{0, 3}}) {
    v1::TensorKey bad = move;
    bad.set_boundary(from);
    bad.set_microbatch(to);
    EXPECT_FALSE(ValidateTensorKey(bad, spec).ok()) << from << " -> " << to;
  }
  v1::TensorKey backward = move;
  backward.set_direction(v1::BACKWARD);
  EXPECT_FALSE(ValidateTensorKey(backward, spec).ok());
}

// Knowledge sharing: teacher stages are members after the student's sites; TEACH keys go from one
// teacher stage to the next, and from the teacher's last to the student's last stage.
TEST(TensorKeyTest, TeachKeysRunThroughTheTeacherToTheStudentsLastStage) {
  JobSpec spec = ThreeSites();
  spec.sites[0].id = "a", spec.sites[1].id = "b", spec.sites[2].id = "c";
  spec.has_teacher = true;
  spec.teacher.sites = {SiteSpec{.id = "t0"}, SiteSpec{.id = "t1"}};
  EXPECT_EQ(spec.MemberSlots(), 5);
  EXPECT_EQ(spec.MemberIdAt(4), "t1");
  EXPECT_EQ(spec.MemberSlot("t0"), 3);
  EXPECT_EQ(spec.MemberSlot("c"), 2);
  EXPECT_EQ(spec.SiteSlot("t0"), -1);  // Not a student site.
  EXPECT_EQ(spec.TeacherStageOf(4), 1);
  EXPECT_EQ(spec.TeacherStageOf(2), -1);
  v1::TensorKey inside = Key(0, v1::FORWARD, 3), last = Key(1, v1::FORWARD, 3);
  inside.set_purpose(v1::TEACH);
  last.set_purpose(v1::TEACH);
  ASSERT_TRUE(ValidateTensorKey(inside, spec).ok());
  ASSERT_TRUE(ValidateTensorKey(last, spec).ok());
  EXPECT_EQ(ProducerSlot(inside, spec), 3);
  EXPECT_EQ(ConsumerSlot(inside, spec), 4);
  EXPECT_EQ(ProducerSlot(last, spec), 4);
  EXPECT_EQ(ConsumerSlot(last, spec), 2);
  EXPECT_EQ(TensorKeyToString(last), "fed/s12/m3/b1/fwd/g0/teach");
  v1::TensorKey bad = last;
  bad.set_boundary(2);  // There is no third teacher stage.
  EXPECT_FALSE(ValidateTensorKey(bad, spec).ok());
  // Back to the teacher flows only the pace: from the student's last stage to the teacher's first,
  // one per step (microbatch 0, boundary 0).
  v1::TensorKey pace = last;
  pace.set_direction(v1::BACKWARD);
  EXPECT_FALSE(ValidateTensorKey(pace, spec).ok());  // Boundary 1, microbatch 3.
  pace.set_boundary(0);
  pace.set_microbatch(0);
  ASSERT_TRUE(ValidateTensorKey(pace, spec).ok());
  EXPECT_EQ(ProducerSlot(pace, spec), 2);
  EXPECT_EQ(ConsumerSlot(pace, spec), 3);
  bad = last;
  bad.set_microbatch(4);
  EXPECT_FALSE(ValidateTensorKey(bad, spec).ok());
  spec.has_teacher = false;
  EXPECT_FALSE(ValidateTensorKey(last, spec).ok());
}

// Serving: the client's prompt (through the gateway) to the first stage, rows along the stages,
// tokens from the last stage to the first and to the client (through the gateway).
TEST(TensorKeyTest, ServeKeysRunFromTheClientThroughTheStagesAndBack) {
  JobSpec spec = ThreeSites();
  spec.model.family = ModelFamily::kGpt;
  spec.model.gpt.context = 64;
  v1::TensorKey key = Key(0, v1::FORWARD, 63);
  key.set_purpose(v1::SERVE);
  EXPECT_FALSE(ValidateTensorKey(key, spec).ok());  // A job that serves nobody.
  spec.serving.clients = {"alice"};
  ASSERT_TRUE(ValidateTensorKey(key, spec).ok());
  EXPECT_EQ(ProducerSlot(key, spec), 0);  // Rows of stage 0 to stage 1.
  EXPECT_EQ(ConsumerSlot(key, spec), 1);
  key.set_boundary(2);  // The prompt.
  EXPECT_EQ(ProducerSlot(key, spec), -1);
  EXPECT_EQ(ConsumerSlot(key, spec), 0);
  key.set_direction(v1::BACKWARD);
  EXPECT_FALSE(ValidateTensorKey(key, spec).ok());  // Tokens go to boundary 0 or 1 only.
  key.set_boundary(0);
  EXPECT_EQ(ProducerSlot(key, spec), 2);
  EXPECT_EQ(ConsumerSlot(key, spec), 0);
  key.set_boundary(1);
  EXPECT_EQ(ConsumerSlot(key, spec), -1);
  EXPECT_EQ(TensorKeyToString(key), "fed/s12/m63/b1/bwd/g0/serve");
  key.set_microbatch(64);  // Past the context.
  EXPECT_FALSE(ValidateTensorKey(key, spec).ok());
}

TEST(TensorKeyTest, Validates) {
  JobSpec spec = ThreeSites();
  EXPECT_TRUE(ValidateTensorKey(Key(1, v1::BACKWARD, 3), spec).ok());
  EXPECT_FALSE(ValidateTensorKey(Key(2, v1::FORWARD), spec).ok());     // no boundary 2
  EXPECT_FALSE(ValidateTensorKey(Key(0, v1::FORWARD, 4), spec).ok());  // microbatch 4 of 4
  EXPECT_FALSE(ValidateTensorKey(Key(0, v1::DIRECTION_UNSPECIFIED), spec).ok());
  v1::TensorKey other = Key(0, v1::FORWARD);
  other.set_job("other");
  EXPECT_FALSE(ValidateTensorKey(other, spec).ok());
}

TEST(TensorKeyTest, ToString) {
  EXPECT_EQ(TensorKeyToString(Key(1, v1::BACKWARD, 3)), "fed/s12/m3/b1/bwd/g0");
}

}  // namespace
}  // namespace strait

#include "core/join_request.h"

namespace strait {
namespace {

TEST(JoinRequestTest, ClaimsWhatTheJobSpecSays) {
  JobSpec spec = ThreeSites();
  spec.sites[1] =
      SiteSpec{.id = "dc-b", .layers = {2, 5}, .device = DeviceKind::kCuda, .workers = 4};
  v1::JoinRequest join = JoinRequestFor(spec, 1, UnsignedKey("dc-b", 3));
  EXPECT_EQ(join.federation(), "fed");
  EXPECT_EQ(join.layers().start(), 2u);
  EXPECT_EQ(join.layers().end(), 5u);
  EXPECT_EQ(join.device(), "cuda");
  EXPECT_EQ(join.workers(), 4u);
  EXPECT_EQ(join.key().site_id(), "dc-b");
  EXPECT_EQ(join.key().epoch(), 3u);
}

TEST(TensorKeyTest, ReplicasKeysNameTheirPipelineAndSumsHaveTheGatewayAtOneEnd) {
  JobSpec spec = ThreeSites();
  for (int s = 0; s < 3; ++s) spec.sites[s].id = std::string(1, static_cast<char>('a' + s));
  spec.replicas = {{"a", "b", "c"}, {"d", "e", "f"}};
  v1::TensorKey train = Key(1, v1::FORWARD);
  train.set_replica(1);
  EXPECT_TRUE(ValidateTensorKey(train, spec).ok());
  EXPECT_EQ(ProducerSlot(train, spec), 4);  // e
  EXPECT_EQ(ConsumerSlot(train, spec), 5);  // f
  EXPECT_EQ(TensorKeyToString(train), "fed/s12/m0/b1/fwd/g0/r1");
  train.set_replica(2);
  EXPECT_FALSE(ValidateTensorKey(train, spec).ok());

  v1::TensorKey sum = Key(2, v1::FORWARD, /*microbatch=*/4);  // Stage 2, four lanes a word.
  sum.set_purpose(v1::SUM);
  sum.set_replica(1);
  EXPECT_TRUE(ValidateTensorKey(sum, spec).ok());
  EXPECT_EQ(ProducerSlot(sum, spec), 5);
  EXPECT_EQ(ConsumerSlot(sum, spec), -1);  // The gateway takes the masked vector...
  sum.set_direction(v1::BACKWARD);
  EXPECT_EQ(ProducerSlot(sum, spec), -1);  // ...and produces the sum.
  EXPECT_EQ(ConsumerSlot(sum, spec), 5);
  sum.set_microbatch(3);  // Not 1, 2 or 4 values a word.
  EXPECT_FALSE(ValidateTensorKey(sum, spec).ok());
  sum.set_microbatch(1);
  sum.set_boundary(3);  // No stage 3.
  EXPECT_FALSE(ValidateTensorKey(sum, spec).ok());
  spec.replicas.clear();  // No replicas, no sums.
  sum.set_boundary(0);
  sum.set_replica(0);
  EXPECT_FALSE(ValidateTensorKey(sum, spec).ok());
}

}  // namespace
}  // namespace strait
