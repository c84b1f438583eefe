// The gateway's side of serving (gateway/exchange/serving_gate.h): only a client the job names may
// ask, and only once the federation started; a prompt that is no prompt of a request handed out is
// refused; a request stores the prompt for the first stage, tells every stage, and answers with the
// last stage's tokens in position order.
#include "gateway/exchange/serving_gate.h"

#include <gtest/gtest.h>

#include <optional>

#include "core/join_request.h"
#include "fake_channel.h"
#include "test_frames.h"

namespace strait::gateway {
namespace {

JobSpec ServingSpec() {
  JobSpec spec;
  spec.name = "served";
  spec.model.family = ModelFamily::kGpt;
  spec.model.gpt = GptSpec{.vocab = 256, .context = 16, .dim = 32, .depth = 2, .heads = 4};
  spec.sites = {SiteSpec{.id = "a", .layers = {0, 2}}, SiteSpec{.id = "b", .layers = {2, 4}}};
  spec.links.resize(1);
  spec.serving.clients = {"alice"};
  return spec;
}

v1::TensorKey ServeKey(uint64_t request, uint32_t position, uint32_t boundary,
                       v1::Direction direction, uint32_t generation) {
  v1::TensorKey key = testing::Key(request, position, boundary, direction, generation);
  key.set_job("served");
  key.set_purpose(v1::SERVE);
  return key;
}

// A frame of `values` floats (the bytes do not matter to the gateway).
v1::FrameHeader Header(const v1::TensorKey& key, int values) {
  v1::FrameHeader header = testing::Header(key, 4 * values + 16);
  header.clear_shape();
  header.add_shape(values);
  header.set_raw_bytes(4 * values);
  return header;
}

class ServingGateTest : public ::testing::Test {
 protected:
  ServingGateTest() : spec_(ServingSpec()), fed_(spec_, JobView::Initial(spec_)) {}

  void Start() {
    const auto now = Federation::Clock::now();
    for (int stage = 0; stage < 2; ++stage) {
      const std::string& id = spec_.sites[stage].id;
      ASSERT_TRUE(fed_.Join(id, JoinRequestFor(spec_, stage, UnsignedKey(id, 7)), now).ok());
      channels_[stage] = std::make_shared<testing::FakeChannel>();
      ASSERT_TRUE(fed_.Attach(id, 7, channels_[stage], now).ok());
    }
  }

  JobSpec spec_;
  Federation fed_;
  Mailbox mailbox_{1 << 20};
  ServingGate gate_{spec_, mailbox_, fed_, 1 << 20};
  std::shared_ptr<testing::FakeChannel> channels_[2];
};

TEST_F(ServingGateTest, OnlyANamedClientMayAskAndOnlyOnceStarted) {
  absl::StatusOr<v1::ServeKeysReply> keys = gate_.Keys("mallory");
  EXPECT_EQ(keys.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(
      fed_.Snapshot({}, Federation::Clock::now()).rejected_by_reason().at("unauthorized_client"),
      1u);
  EXPECT_EQ(gate_.Keys("alice").status().code(), absl::StatusCode::kFailedPrecondition);
  Start();
  keys = gate_.Keys("alice");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_EQ(keys->first().site_id(), "a");
  EXPECT_EQ(keys->last().site_id(), "b");
  EXPECT_EQ(keys->stages(), 2u);
  EXPECT_EQ(keys->generation(), 1u);
}

TEST_F(ServingGateTest, ARequestGoesToEveryStageAndComesBackInPositionOrder) {
  Start();
  absl::StatusOr<v1::ServeKeysReply> keys = gate_.Keys("alice");
  ASSERT_TRUE(keys.ok()) << keys.status();
  const uint64_t request = keys->request();
  const uint32_t generation = keys->generation();
  v1::GenerateRequest ask;
  ask.mutable_key()->set_site_id("alice");
  *ask.mutable_prompt() = Header(ServeKey(request, 0, 1, v1::FORWARD, generation), 3);
  ask.set_prompt_body(std::string(ask.prompt().wire_bytes(), 'p'));
  ask.set_tokens(4);
  std::optional<absl::StatusOr<v1::GenerateReply>> answer;
  auto done = [&](absl::StatusOr<v1::GenerateReply> reply) { answer = std::move(reply); };

  // Refused: another purpose, a request never handed out, a key not the caller's.
  v1::GenerateRequest bad = ask;
  bad.mutable_prompt()->mutable_key()->set_purpose(v1::TRAIN);
  gate_.Generate("alice", bad, done);
  EXPECT_EQ(answer->status().code(), absl::StatusCode::kInvalidArgument) << answer->status();
  bad = ask;
  bad.mutable_prompt()->mutable_key()->set_step(request + 5);
  gate_.Generate("alice", bad, done);
  EXPECT_EQ(answer->status().code(), absl::StatusCode::kInvalidArgument) << answer->status();
  bad = ask;
  bad.mutable_key()->set_site_id("bob");
  gate_.Generate("alice", bad, done);
  EXPECT_EQ(answer->status().code(), absl::StatusCode::kPermissionDenied) << answer->status();
  answer.reset();

  gate_.Generate("alice", ask, done);
  EXPECT_TRUE(mailbox_.Holds(MailboxKey::From(ask.prompt().key())));  // For the first stage.
  for (auto& channel : channels_) {
    const std::vector<v1::GatewayMessage> messages = channel->messages();
    ASSERT_FALSE(messages.empty());
    ASSERT_TRUE(messages.back().control().has_serve());
    EXPECT_EQ(messages.back().control().serve().request(), request);
    EXPECT_EQ(messages.back().control().serve().prompt_tokens(), 3u);
    EXPECT_EQ(messages.back().control().serve().tokens(), 4u);
  }
  // The last stage's tokens of positions 3..6, pushed out of order.
  for (uint32_t position : {4u, 3u, 6u, 5u}) {
    EXPECT_FALSE(answer.has_value());
    const v1::TensorKey key = ServeKey(request, position, 1, v1::BACKWARD, generation);
    ASSERT_TRUE(mailbox_.Reserve(4 + 16, [] {}).value());
    mailbox_.Store(std::make_shared<StoredFrame>(
        Header(key, 1), std::vector<std::string>{std::string(20, static_cast<char>(position))}));
  }
  ASSERT_TRUE(answer.has_value());
  ASSERT_TRUE(answer->ok()) << answer->status();
  ASSERT_EQ((*answer)->tokens_size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*answer)->tokens(i).header().key().microbatch(), 3u + i);
    EXPECT_EQ((*answer)->tokens(i).body(), std::string(20, static_cast<char>(3 + i)));
  }
  EXPECT_EQ(gate_.State().requests(), 1u);
  EXPECT_EQ(gate_.State().tokens(), 4u);
}

}  // namespace
}  // namespace strait::gateway
