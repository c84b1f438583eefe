// The gateway's secure sums through its exchange sessions (gateway/aggregate/replica_sums.h): the
// replicas of a stage push masked vectors as SUM frames, each pulls the sum; a vector from a site
// that is not the key's replica, or one pushed again, is refused and counted.
#include "gateway/aggregate/replica_sums.h"

#include <gtest/gtest.h>

#include <cstring>

#include "compression/codec_chain.h"
#include "core/join_request.h"
#include "fake_channel.h"
#include "gateway/exchange/exchange_session.h"

namespace strait::gateway {
namespace {

using testing::FakeChannel;

// Two stages, two replicas: pipelines [a, b] and [c, d].
JobSpec TwoByTwo() {
  JobSpec spec;
  spec.name = "sums";
  spec.model.mlp.hidden = {8};
  spec.sites = {SiteSpec{.id = "a", .layers = {0, 1}}, SiteSpec{.id = "b", .layers = {1, 2}}};
  spec.links.resize(1);
  spec.replicas = {{"a", "b"}, {"c", "d"}};
  spec.gateway.memory_budget = 1 << 20;
  spec.gateway.heartbeat_timeout_s = 3600;
  return spec;
}

v1::TensorKey SumKey(uint32_t stage, uint32_t replica, v1::Direction direction, uint32_t lanes) {
  v1::TensorKey key;
  key.set_job("sums");
  key.set_step(10);
  key.set_microbatch(lanes);
  key.set_boundary(stage);
  key.set_direction(direction);
  key.set_purpose(v1::SUM);
  key.set_replica(replica);
  return key;
}

// A masked vector's push: the words as floats' bits, encoded with the chain `none`.
v1::SiteMessage SumPush(uint64_t transfer, const v1::TensorKey& key,
                        const std::vector<uint32_t>& words,
                        const std::string& chain_text = "none") {
  std::vector<float> values(words.size());
  std::memcpy(values.data(), words.data(), 4 * words.size());
  auto chain = compression::CodecChain::Create(chain_text);
  auto body = (*chain)->Encode(values, {values.size()});
  v1::SiteMessage m;
  v1::PushChunk& push = *m.mutable_push();
  push.set_transfer_id(transfer);
  v1::FrameHeader& h = *push.mutable_header();
  *h.mutable_key() = key;
  h.set_codec_chain(chain_text);
  h.set_dtype(v1::FLOAT32);
  h.add_shape(static_cast<int64_t>(words.size()));
  h.set_raw_bytes(4 * words.size());
  h.set_wire_bytes(body->size());
  h.set_chunk_count(1);
  push.mutable_chunk()->set_index(0);
  push.mutable_chunk()->set_data(
      std::string(reinterpret_cast<const char*>(body->data()), body->size()));
  return m;
}

class ReplicaSumsTest : public ::testing::Test {
 protected:
  // Frames of at most 64 KiB, so that standing credit may use the rest of the budget, 4 KiB a
  // stream.
  ReplicaSumsTest()
      : spec_(TwoByTwo()),
        core_(spec_, GatewayOptions{.max_frame_bytes = 64 << 10, .push_credit_bytes = 4096}) {}

  // A joined site's two streams: pushes (with standing credit, so that they need no offer) and
  // the primary one (pulls).
  struct Streams {
    std::shared_ptr<FakeChannel> push_out, out;
    std::unique_ptr<ExchangeSession> push, primary;
  };
  Streams Open(const std::string& id) {
    const int slot = spec_.SiteSlot(id);
    v1::JoinRequest join = JoinRequestFor(spec_, slot % spec_.Stages(), UnsignedKey(id, 1));
    auto reply = core_.federation().Join(id, join, Federation::Clock::now());
    EXPECT_TRUE(reply.ok()) << reply.status();
    Streams s{std::make_shared<FakeChannel>(), std::make_shared<FakeChannel>()};
    s.primary = std::make_unique<ExchangeSession>(core_, id, s.out);
    s.push = std::make_unique<ExchangeSession>(core_, id, s.push_out);
    v1::SiteMessage hello;
    hello.mutable_hello()->set_epoch(1);
    s.primary->Handle(hello);
    hello.mutable_hello()->set_push_only(true);
    hello.mutable_hello()->set_credit(true);
    s.push->Handle(hello);
    return s;
  }

  // The words of the last frame delivered on `out`.
  static std::vector<uint32_t> Delivered(FakeChannel& out) {
    const auto frames = out.frames();
    if (frames.empty()) return {};
    const StoredFrame& frame = *frames.back().second;
    compression::TensorDecoder decoder;
    compression::DecodedTensor tensor;
    const std::string& body = frame.chunk(0);
    EXPECT_TRUE(
        decoder.Decode({reinterpret_cast<const uint8_t*>(body.data()), body.size()}, &tensor).ok());
    std::vector<uint32_t> words(tensor.values.size());
    std::memcpy(words.data(), tensor.values.data(), 4 * words.size());
    return words;
  }

  static int LastPushAckCode(FakeChannel& out) {
    const auto messages = out.messages();
    for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
      if (it->has_push_ack()) return it->push_ack().status_code();
    }
    return -1;
  }

  JobSpec spec_;
  GatewayCore core_;
};

TEST_F(ReplicaSumsTest, EachReplicaPullsTheSumOfTheStagesVectorsLaneByLane) {
  Streams a = Open("a"), c = Open("c");
  // Four 8-bit lanes a word: 0xff + 0x02 wraps to 0x01 in its lane without carrying.
  a.push->Handle(SumPush(1, SumKey(0, 0, v1::FORWARD, 4), {0x010203ffu, 7u}));
  c.push->Handle(SumPush(1, SumKey(0, 1, v1::FORWARD, 4), {0x01010102u, 0xffffffffu}));
  EXPECT_EQ(LastPushAckCode(*a.push_out), 0);
  EXPECT_EQ(LastPushAckCode(*c.push_out), 0);
  v1::SiteMessage pull;
  pull.mutable_pull()->set_pull_id(5);
  *pull.mutable_pull()->mutable_key() = SumKey(0, 0, v1::BACKWARD, 4);
  a.primary->Handle(pull);
  EXPECT_EQ(Delivered(*a.out), (std::vector<uint32_t>{0x02030401u, 0xffffff06u}));
  const ReplicaSums::Stats stats = core_.sums().GetStats();
  EXPECT_EQ(stats.rounds, 1u);
  EXPECT_GT(stats.bytes_in, 0u);
  // The masked vectors left the mailbox; the sums wait there for their replicas.
  EXPECT_EQ(core_.mailbox().GetStats().stored_frames, 2u);
}

TEST_F(ReplicaSumsTest, StrangersForgedSumsAndReplaysAreRefusedAndCounted) {
  Streams a = Open("a"), b = Open("b");
  // b (stage 1) pushes a vector of stage 0's round: not its key.
  b.push->Handle(SumPush(1, SumKey(0, 0, v1::FORWARD, 1), {1, 2}));
  EXPECT_EQ(LastPushAckCode(*b.push_out), static_cast<int>(absl::StatusCode::kPermissionDenied));
  // a pushes a sum, which only the gateway produces.
  a.push->Handle(SumPush(2, SumKey(0, 0, v1::BACKWARD, 1), {1, 2}));
  EXPECT_EQ(LastPushAckCode(*a.push_out), static_cast<int>(absl::StatusCode::kPermissionDenied));
  // a's vector, then the same again: a replay, acknowledged (idempotent) but never added twice.
  a.push->Handle(SumPush(3, SumKey(0, 0, v1::FORWARD, 1), {1, 2}));
  a.push->Handle(SumPush(4, SumKey(0, 0, v1::FORWARD, 1), {1, 2}));
  const v1::FederationState state = core_.Snapshot();
  EXPECT_EQ(state.rejected_by_reason().at("unauthorized"), 2u);
  EXPECT_EQ(state.rejected_by_reason().at("sum_refused"), 1u);
  EXPECT_EQ(core_.sums().GetStats().rounds, 0u);
}

// A compressed masked vector's length would depend on its values: refused, whatever it holds.
TEST_F(ReplicaSumsTest, ACompressedMaskedVectorIsRefused) {
  Streams a = Open("a");
  a.push->Handle(SumPush(1, SumKey(0, 0, v1::FORWARD, 8), std::vector<uint32_t>(64, 0), "zstd"));
  EXPECT_EQ(core_.Snapshot().rejected_by_reason().at("sum_refused"), 1u);
  EXPECT_EQ(core_.sums().GetStats().rounds, 0u);
}

TEST_F(ReplicaSumsTest, EachPipelinesLinksAreCountedApart) {
  Streams a = Open("a"), c = Open("c");
  auto activations = [](uint32_t replica) {
    v1::TensorKey key = SumKey(0, replica, v1::FORWARD, 0);
    key.set_purpose(v1::TRAIN);
    return key;
  };
  a.push->Handle(SumPush(1, activations(0), {1, 2}));
  c.push->Handle(SumPush(1, activations(1), {1, 2, 3}));
  c.push->Handle(SumPush(2,
                         [&] {
                           v1::TensorKey key = activations(1);
                           key.set_microbatch(1);
                           return key;
                         }(),
                         {4}));
  const v1::FederationState state = core_.Snapshot();
  ASSERT_EQ(state.links_size(), 2);
  EXPECT_EQ(state.links(0).replica(), 0u);
  EXPECT_EQ(state.links(0).frames(), 1u);
  EXPECT_EQ(state.links(1).replica(), 1u);
  EXPECT_EQ(state.links(1).frames(), 2u);
  EXPECT_EQ(state.links(1).raw_bytes(), 16u);
}

}  // namespace
}  // namespace strait::gateway
