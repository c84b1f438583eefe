#include "gateway/exchange/exchange_session.h"

#include <gtest/gtest.h>

#include "core/join_request.h"
#include "fake_channel.h"
#include "test_frames.h"

namespace strait::gateway {
namespace {

using testing::FakeChannel;
using testing::Header;
using testing::Key;

v1::JoinRequest JoinRequestFor(const JobSpec& spec, const JobView& view, int stage,
                               uint32_t epoch) {
  return strait::JoinRequestFor(spec, view, stage, UnsignedKey(spec.sites[stage].id, epoch));
}

v1::JoinRequest JoinRequestFor(const JobSpec& spec, int stage, uint32_t epoch) {
  return JoinRequestFor(spec, JobView::Initial(spec), stage, epoch);
}

v1::SiteMessage Hello(uint32_t epoch) {
  v1::SiteMessage m;
  m.mutable_hello()->set_epoch(epoch);
  return m;
}

v1::SiteMessage PushMsg(uint64_t transfer, const v1::TensorKey& key, std::string body) {
  v1::SiteMessage m;
  v1::PushChunk& push = *m.mutable_push();
  push.set_transfer_id(transfer);
  *push.mutable_header() = Header(key, body.size(), 1);
  push.mutable_chunk()->set_index(0);
  push.mutable_chunk()->set_data(std::move(body));
  return m;
}

// Chunk `index` of a frame of `chunks` chunks of 10 bytes under `key` (header with chunk 0).
v1::SiteMessage ChunkMsg(uint64_t transfer, const v1::TensorKey& key, uint32_t index,
                         uint32_t chunks) {
  v1::SiteMessage m;
  v1::PushChunk& push = *m.mutable_push();
  push.set_transfer_id(transfer);
  if (index == 0) *push.mutable_header() = Header(key, 10ull * chunks, chunks);
  push.mutable_chunk()->set_index(index);
  push.mutable_chunk()->set_data(std::string(10, static_cast<char>('0' + index)));
  return m;
}

v1::SiteMessage OfferMsg(uint64_t transfer, const v1::TensorKey& key, uint64_t wire_bytes) {
  v1::SiteMessage m;
  m.mutable_offer()->set_transfer_id(transfer);
  *m.mutable_offer()->mutable_header() = Header(key, wire_bytes, 1);
  return m;
}

v1::SiteMessage PullMsg(uint64_t pull_id, const v1::TensorKey& key) {
  v1::SiteMessage m;
  m.mutable_pull()->set_pull_id(pull_id);
  *m.mutable_pull()->mutable_key() = key;
  return m;
}

v1::SiteMessage AckMsg(const v1::TensorKey& key) {
  v1::SiteMessage m;
  *m.mutable_ack()->mutable_key() = key;
  return m;
}

class ExchangeSessionTest : public ::testing::Test {
 protected:
  ExchangeSessionTest() {
    spec_ = testing::ThreeSiteSpec();
    for (int i = 0; i < 3; ++i) spec_.sites[i].layers = {i, i + 1};
    spec_.gateway.memory_budget = 1000;
    spec_.gateway.heartbeat_timeout_s = 3600;
    view_ = JobView::Initial(spec_);
    core_ = std::make_unique<GatewayCore>(spec_, GatewayOptions{});
  }

  // Joins stage `stage` (with `epoch`, offering checkpoint `checkpoint` when > 0) and opens a
  // session for it that has said Hello.
  std::unique_ptr<ExchangeSession> Open(int stage, std::shared_ptr<FakeChannel>& channel,
                                        uint32_t epoch = 1, uint64_t checkpoint = 0) {
    v1::JoinRequest join = JoinRequestFor(spec_, view_, stage, epoch);
    if (checkpoint > 0) {
      join.set_has_checkpoint(true);
      join.set_checkpoint_step(checkpoint);
    }
    auto reply = core_->federation().Join(spec_.sites[stage].id, join, Federation::Clock::now());
    EXPECT_TRUE(reply.ok()) << reply.status();
    channel = std::make_shared<FakeChannel>();
    auto session = std::make_unique<ExchangeSession>(*core_, spec_.sites[stage].id, channel);
    session->Handle(Hello(epoch));
    return session;
  }

  // The Rollback controls `channel` received, in order.
  static std::vector<v1::Rollback> Rollbacks(FakeChannel& channel) {
    std::vector<v1::Rollback> out;
    for (const v1::GatewayMessage& m : channel.messages()) {
      if (m.control().has_rollback()) out.push_back(m.control().rollback());
    }
    return out;
  }

  // Recreates the core with frames of at most `max_frame_bytes` (so that standing credit may use
  // the budget minus one such frame) and `push_credit_bytes` of credit per push stream.
  void UseCreditOptions(uint64_t max_frame_bytes, uint64_t push_credit_bytes) {
    GatewayOptions options;
    options.max_frame_bytes = max_frame_bytes;
    options.push_credit_bytes = push_credit_bytes;
    core_.reset();
    core_ = std::make_unique<GatewayCore>(spec_, options);
  }

  // Opens the push stream of stage `stage` (joined already), asking for standing credit or not.
  std::unique_ptr<ExchangeSession> OpenPushStream(int stage, bool credit,
                                                  std::shared_ptr<FakeChannel>& channel) {
    channel = std::make_shared<FakeChannel>();
    auto session = std::make_unique<ExchangeSession>(*core_, spec_.sites[stage].id, channel);
    v1::SiteMessage hello = Hello(1);
    hello.mutable_hello()->set_push_only(true);
    hello.mutable_hello()->set_credit(credit);
    session->Handle(hello);
    return session;
  }

  static std::vector<uint64_t> Grants(FakeChannel& channel) {
    std::vector<uint64_t> grants;
    for (const v1::GatewayMessage& m : channel.messages()) {
      if (m.has_push_grant()) grants.push_back(m.push_grant().transfer_id());
    }
    return grants;
  }

  static uint64_t CreditGranted(FakeChannel& channel) {
    uint64_t bytes = 0;
    for (const v1::GatewayMessage& m : channel.messages()) {
      if (m.has_push_credit()) bytes += m.push_credit().bytes();
    }
    return bytes;
  }

  // Offers a frame of `bytes` under `transfer` and expects its grant at once (the budget has room),
  // so that the push that follows is funded (gateway.proto, Hello).
  static void Offer(ExchangeSession& session, FakeChannel& out, uint64_t transfer,
                    const v1::TensorKey& key, uint64_t bytes) {
    session.Handle(OfferMsg(transfer, key, bytes));
    const std::vector<uint64_t> grants = Grants(out);
    EXPECT_TRUE(!grants.empty() && grants.back() == transfer) << "no grant for " << transfer;
  }

  static v1::PushAck LastPushAck(FakeChannel& channel) {
    const std::vector<v1::GatewayMessage> messages = channel.messages();
    for (auto it = messages.rbegin(); it != messages.rend(); ++it) {
      if (it->has_push_ack()) return it->push_ack();
    }
    return {};
  }

  JobSpec spec_;
  JobView view_;  // The split the sites claim in their joins.
  std::unique_ptr<GatewayCore> core_;
};

TEST_F(ExchangeSessionTest, ForwardActivationTravelsFromProducerToConsumer) {
  std::shared_ptr<FakeChannel> a_out, b_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  const v1::TensorKey key = Key(0, 0, 0, v1::FORWARD);
  b->Handle(PullMsg(7, key));  // waits: not pushed yet
  EXPECT_TRUE(b_out->frames().empty());
  Offer(*a, *a_out, 1, key, 12);
  a->Handle(PushMsg(1, key, "sealed-bytes"));
  EXPECT_EQ(LastPushAck(*a_out).status_code(), 0);
  ASSERT_EQ(b_out->frames().size(), 1u);
  EXPECT_EQ(b_out->frames()[0].first, 7u);
  EXPECT_EQ(b_out->frames()[0].second->chunk(0), "sealed-bytes");
  EXPECT_EQ(core_->Snapshot().links(0).queue_depth(), 1u);  // Held until the consumer acks.
  b->Handle(AckMsg(key));
  EXPECT_EQ(core_->mailbox().GetStats().stored_frames, 0u);
  v1::FederationState state = core_->Snapshot();
  EXPECT_EQ(state.links(0).queue_depth(), 0u);
  ASSERT_EQ(state.links_size(), 1);
  EXPECT_EQ(state.links(0).frames(), 1u);
  EXPECT_EQ(state.links(0).raw_bytes(), 24u);
  EXPECT_EQ(state.links(0).wire_bytes(), 12u);
}

TEST_F(ExchangeSessionTest, FramesStreamToTheConsumerAndRestartWhenTheirProducerDies) {
  std::shared_ptr<FakeChannel> a_out, b_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  const v1::TensorKey key = Key(0, 0, 0, v1::FORWARD);
  b->Handle(PullMsg(7, key));
  Offer(*a, *a_out, 1, key, 30);
  a->Handle(ChunkMsg(1, key, 0, 3));
  a->Handle(ChunkMsg(1, key, 1, 3));
  // The consumer has the frame before its last chunk arrived; the producer has no ack yet.
  ASSERT_EQ(b_out->frames().size(), 1u);
  FramePtr first = b_out->frames()[0].second;
  EXPECT_EQ(first->available(), 2u);
  EXPECT_FALSE(LastPushAck(*a_out).has_key());
  // The producer's stream dies mid-frame: the frame breaks off and its bytes are freed.
  a->Close();
  EXPECT_TRUE(first->broken());
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 0u);
  // The consumer's delivery pulls again (the real channel does so after telling the site to
  // restart): the pull waits for the producer's next push of the key, which arrives whole.
  b_out->pull_again(0)();
  EXPECT_EQ(core_->mailbox().GetStats().waiting_pulls, 1u);
  std::shared_ptr<FakeChannel> a2_out;
  auto a2 = Open(0, a2_out, /*epoch=*/2);
  Offer(*a2, *a2_out, 1, key, 30);
  for (uint32_t i = 0; i < 3; ++i) a2->Handle(ChunkMsg(1, key, i, 3));
  EXPECT_EQ(LastPushAck(*a2_out).status_code(), 0);
  ASSERT_EQ(b_out->frames().size(), 2u);
  EXPECT_EQ(b_out->frames()[1].first, 7u);  // the same pull
  EXPECT_TRUE(b_out->frames()[1].second->complete());
  EXPECT_EQ(b_out->frames()[1].second->chunk(2), std::string(10, '2'));
  b->Handle(AckMsg(key));
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 0u);
  EXPECT_EQ(core_->Snapshot().links(0).frames(), 1u);  // the broken push is not counted
}

TEST_F(ExchangeSessionTest, APushOfAKeyHeldWholeIsAcknowledgedAtItsFirstChunk) {
  // Pushes funded by standing credit, so that the retry's body comes without an offer.
  UseCreditOptions(/*max_frame_bytes=*/100, /*push_credit_bytes=*/200);
  std::shared_ptr<FakeChannel> a_out, b_out, a_push_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  auto a_push = OpenPushStream(0, /*credit=*/true, a_push_out);
  const v1::TensorKey key = Key(0, 0, 0, v1::FORWARD);
  for (uint32_t i = 0; i < 3; ++i) a_push->Handle(ChunkMsg(1, key, i, 3));
  // A retry after a reconnect: acknowledged at once; the rest of its body is dropped quietly.
  a_push->Handle(ChunkMsg(2, key, 0, 3));
  EXPECT_EQ(LastPushAck(*a_push_out).transfer_id(), 2u);
  EXPECT_EQ(LastPushAck(*a_push_out).status_code(), 0);
  a_push->Handle(ChunkMsg(2, key, 1, 3));
  a_push->Handle(ChunkMsg(2, key, 2, 3));
  EXPECT_EQ(core_->Snapshot().rejected_frames(), 0u);
  // The frame's 30 bytes; the rest of what is reserved is the push stream's standing credit.
  const Mailbox::Stats stats = core_->mailbox().GetStats();
  EXPECT_EQ(stats.reserved_bytes - stats.credit_bytes, 30u);
  EXPECT_EQ(stats.duplicates, 1u);
}

TEST_F(ExchangeSessionTest, MessagesBeforeHelloAreRefusedButTheStreamStaysUsable) {
  ASSERT_TRUE(
      core_->federation().Join("a", JoinRequestFor(spec_, 0, 5), Federation::Clock::now()).ok());
  auto channel = std::make_shared<FakeChannel>();
  ExchangeSession session(*core_, "a", channel);
  session.Handle(PushMsg(1, Key(0, 0, 0, v1::FORWARD), "x"));
  ASSERT_EQ(channel->messages().size(), 1u);
  EXPECT_EQ(channel->messages()[0].error().status_code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  session.Handle(Hello(4));  // stale epoch
  EXPECT_EQ(channel->messages().back().error().status_code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  session.Handle(Hello(5));
  Offer(session, *channel, 2, Key(0, 0, 0, v1::FORWARD), 1);
  session.Handle(PushMsg(2, Key(0, 0, 0, v1::FORWARD), "x"));
  EXPECT_EQ(LastPushAck(*channel).status_code(), 0);
  EXPECT_EQ(core_->Snapshot().rejected_by_reason().at("before_hello"), 1u);
}

TEST_F(ExchangeSessionTest, WrongProducerAndWrongConsumerAreDeniedAndCounted) {
  std::shared_ptr<FakeChannel> a_out, c_out;
  auto a = Open(0, a_out);
  auto c = Open(2, c_out);
  c->Handle(PushMsg(1, Key(0, 0, 0, v1::FORWARD), "x"));  // c does not produce b0
  EXPECT_EQ(LastPushAck(*c_out).status_code(),
            static_cast<int>(absl::StatusCode::kPermissionDenied));
  c->Handle(PullMsg(3, Key(0, 0, 0, v1::FORWARD)));  // nor consume it
  EXPECT_EQ(c_out->messages().back().deliver().status_code(),
            static_cast<int>(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(core_->mailbox().GetStats().stored_frames, 0u);
  EXPECT_EQ(core_->Snapshot().rejected_by_reason().at("unauthorized"), 2u);
  // Valid traffic still flows.
  Offer(*a, *a_out, 2, Key(0, 0, 0, v1::FORWARD), 1);
  a->Handle(PushMsg(2, Key(0, 0, 0, v1::FORWARD), "x"));
  EXPECT_EQ(LastPushAck(*a_out).status_code(), 0);
}

TEST_F(ExchangeSessionTest, MalformedPushIsAnsweredAndCounted) {
  std::shared_ptr<FakeChannel> a_out;
  auto a = Open(0, a_out);
  v1::SiteMessage bad = PushMsg(1, Key(0, 0, 0, v1::FORWARD), "x");
  bad.mutable_push()->mutable_header()->set_chunk_count(0);
  a->Handle(bad);
  EXPECT_EQ(LastPushAck(*a_out).transfer_id(), 1u);
  EXPECT_EQ(LastPushAck(*a_out).key().microbatch(), 0u);
  EXPECT_EQ(LastPushAck(*a_out).status_code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  // The transfer is refused once: the rest of its chunks get no answer of their own.
  const size_t answered = a_out->messages().size();
  a->Handle(ChunkMsg(1, Key(0, 0, 0, v1::FORWARD), 1, 3));
  a->Handle(ChunkMsg(1, Key(0, 0, 0, v1::FORWARD), 2, 3));
  EXPECT_EQ(a_out->messages().size(), answered);
  a->Handle(v1::SiteMessage());  // empty message
  EXPECT_EQ(core_->Snapshot().rejected_by_reason().at("malformed"), 2u);
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 0u);
}

// Admission has one path: standing credit or an offer's grant. A body pushed with neither is
// refused (the gateway never stops reading a stream to wait for memory), counted, and the stream
// goes on: the same frame, offered, is stored once the consumer's ack frees room.
TEST_F(ExchangeSessionTest, AnUnfundedPushIsRefusedCountedAndTheStreamStaysUsable) {
  std::shared_ptr<FakeChannel> a_out, b_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  Offer(*a, *a_out, 1, Key(0, 0, 0, v1::FORWARD), 600);
  a->Handle(PushMsg(1, Key(0, 0, 0, v1::FORWARD), std::string(600, 'x')));
  EXPECT_EQ(LastPushAck(*a_out).status_code(), 0);
  a->Handle(PushMsg(2, Key(0, 1, 0, v1::FORWARD), std::string(600, 'y')));  // no offer, no credit
  EXPECT_EQ(LastPushAck(*a_out).transfer_id(), 2u);
  EXPECT_EQ(LastPushAck(*a_out).status_code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(core_->Snapshot().rejected_by_reason().at("unfunded"), 1u);
  EXPECT_LE(core_->mailbox().GetStats().reserved_bytes, 1000u);
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 600u);
  b->Handle(PullMsg(1, Key(0, 0, 0, v1::FORWARD)));
  b->Handle(AckMsg(Key(0, 0, 0, v1::FORWARD)));
  Offer(*a, *a_out, 3, Key(0, 1, 0, v1::FORWARD), 600);
  a->Handle(PushMsg(3, Key(0, 1, 0, v1::FORWARD), std::string(600, 'y')));
  EXPECT_EQ(core_->mailbox().GetStats().stored_frames, 1u);
  EXPECT_EQ(LastPushAck(*a_out).transfer_id(), 3u);
  EXPECT_EQ(LastPushAck(*a_out).status_code(), 0);
  EXPECT_EQ(core_->Snapshot().rejected_by_reason().at("unfunded"), 1u);
}

TEST_F(ExchangeSessionTest, OfferedFrameIsGrantedWhenThereIsRoomAndTheStreamStaysReadable) {
  UseCreditOptions(/*max_frame_bytes=*/600, /*push_credit_bytes=*/0);
  std::shared_ptr<FakeChannel> a_out, b_out, a_push_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  auto a_push = OpenPushStream(0, /*credit=*/false, a_push_out);
  EXPECT_EQ(CreditGranted(*a_push_out), 0u);  // not asked for
  a_push->Handle(OfferMsg(1, Key(0, 0, 0, v1::FORWARD), 600));
  EXPECT_EQ(Grants(*a_push_out), std::vector<uint64_t>{1});
  a_push->Handle(PushMsg(1, Key(0, 0, 0, v1::FORWARD), std::string(600, 'x')));
  EXPECT_EQ(LastPushAck(*a_push_out).status_code(), 0);
  // The budget is full: the second offer waits, but the stream is still read (no body is parked).
  a_push->Handle(OfferMsg(2, Key(0, 1, 0, v1::FORWARD), 600));
  EXPECT_EQ(Grants(*a_push_out).size(), 1u);
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 600u);
  b->Handle(PullMsg(1, Key(0, 0, 0, v1::FORWARD)));
  b->Handle(AckMsg(Key(0, 0, 0, v1::FORWARD)));
  EXPECT_EQ(Grants(*a_push_out), (std::vector<uint64_t>{1, 2}));
  a_push->Handle(PushMsg(2, Key(0, 1, 0, v1::FORWARD), std::string(600, 'y')));
  EXPECT_EQ(LastPushAck(*a_push_out).transfer_id(), 2u);
  EXPECT_EQ(core_->mailbox().GetStats().stored_frames, 1u);
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 600u);
}

TEST_F(ExchangeSessionTest, OffersAreAnsweredWithoutABodyWhenRefusedOrHeldAlready) {
  UseCreditOptions(/*max_frame_bytes=*/600, /*push_credit_bytes=*/0);
  std::shared_ptr<FakeChannel> a_out, a_push_out, c_push_out;
  auto a = Open(0, a_out);
  auto a_push = OpenPushStream(0, /*credit=*/false, a_push_out);
  Offer(*a_push, *a_push_out, 1, Key(0, 0, 0, v1::FORWARD), 3);  // no credit
  a_push->Handle(PushMsg(1, Key(0, 0, 0, v1::FORWARD), "abc"));
  EXPECT_EQ(LastPushAck(*a_push_out).status_code(), 0);
  // A retry of a held key: acknowledged at once, no grant, nothing reserved.
  a_push->Handle(OfferMsg(2, Key(0, 0, 0, v1::FORWARD), 3));
  EXPECT_EQ(LastPushAck(*a_push_out).transfer_id(), 2u);
  EXPECT_EQ(LastPushAck(*a_push_out).status_code(), 0);
  // Not the key's producer, and a frame over the whole budget.
  a_push->Handle(OfferMsg(3, Key(0, 0, 1, v1::FORWARD), 3));
  EXPECT_EQ(LastPushAck(*a_push_out).status_code(),
            static_cast<int>(absl::StatusCode::kPermissionDenied));
  a_push->Handle(OfferMsg(4, Key(0, 1, 0, v1::FORWARD), 1001));
  EXPECT_NE(LastPushAck(*a_push_out).status_code(), 0);
  EXPECT_EQ(Grants(*a_push_out), std::vector<uint64_t>{1});  // none for offers 2 to 4
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 3u);
}

TEST_F(ExchangeSessionTest, BodyBeforeItsGrantIsRefusedAndTheReservationReturns) {
  UseCreditOptions(/*max_frame_bytes=*/600, /*push_credit_bytes=*/0);
  std::shared_ptr<FakeChannel> a_out, b_out, a_push_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  auto a_push = OpenPushStream(0, /*credit=*/false, a_push_out);
  a_push->Handle(OfferMsg(1, Key(0, 0, 0, v1::FORWARD), 600));
  a_push->Handle(PushMsg(1, Key(0, 0, 0, v1::FORWARD), std::string(600, 'x')));
  a_push->Handle(OfferMsg(2, Key(0, 1, 0, v1::FORWARD), 600));  // waits
  a_push->Handle(PushMsg(2, Key(0, 1, 0, v1::FORWARD), std::string(600, 'y')));
  EXPECT_EQ(LastPushAck(*a_push_out).status_code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(core_->Snapshot().rejected_by_reason().at("unfunded"), 1u);
  b->Handle(PullMsg(1, Key(0, 0, 0, v1::FORWARD)));
  b->Handle(AckMsg(Key(0, 0, 0, v1::FORWARD)));
  // The late grant found no offer: its bytes went back to the budget.
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 0u);
  EXPECT_EQ(Grants(*a_push_out), std::vector<uint64_t>{1});
}

TEST_F(ExchangeSessionTest, StandingCreditFundsPushesWithoutARoundTripAndReturnsOnClose) {
  UseCreditOptions(/*max_frame_bytes=*/300, /*push_credit_bytes=*/500);
  std::shared_ptr<FakeChannel> a_out, b_out, a_push_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  auto a_push = OpenPushStream(0, /*credit=*/true, a_push_out);
  EXPECT_EQ(CreditGranted(*a_push_out), 500u);
  EXPECT_EQ(core_->mailbox().GetStats().credit_bytes, 500u);
  // Within credit: stored at once, and the credit is topped up only as far as the limit allows
  // (budget 1000 minus one largest frame of 300 = 700 of credit at most).
  a_push->Handle(PushMsg(1, Key(0, 0, 0, v1::FORWARD), std::string(300, 'x')));
  EXPECT_EQ(LastPushAck(*a_push_out).status_code(), 0);
  EXPECT_EQ(core_->mailbox().GetStats().stored_frames, 1u);
  EXPECT_EQ(CreditGranted(*a_push_out), 800u);
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 800u);
  // A frame beyond what is left of the budget is offered, and granted once the consumer acks.
  a_push->Handle(OfferMsg(2, Key(0, 1, 0, v1::FORWARD), 300));
  EXPECT_TRUE(Grants(*a_push_out).empty());
  b->Handle(PullMsg(1, Key(0, 0, 0, v1::FORWARD)));
  b->Handle(AckMsg(Key(0, 0, 0, v1::FORWARD)));
  EXPECT_EQ(Grants(*a_push_out), std::vector<uint64_t>{2});
  a_push->Close();
  EXPECT_EQ(core_->mailbox().GetStats().credit_bytes, 0u);
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 0u);
}

TEST_F(ExchangeSessionTest, StandingCreditIsToppedUpOnceAQuarterIsUsedNotAfterEveryFrame) {
  UseCreditOptions(/*max_frame_bytes=*/100, /*push_credit_bytes=*/400);
  std::shared_ptr<FakeChannel> a_out, a_push_out;
  auto a = Open(0, a_out);
  auto a_push = OpenPushStream(0, /*credit=*/true, a_push_out);
  EXPECT_EQ(CreditGranted(*a_push_out), 400u);
  auto credit_messages = [&] {
    size_t n = 0;
    for (const v1::GatewayMessage& m : a_push_out->messages()) n += m.has_push_credit();
    return n;
  };
  // 50 of 400 used, 350 left (more than a largest frame): no top-up yet.
  a_push->Handle(PushMsg(1, Key(0, 0, 0, v1::FORWARD), std::string(50, 'x')));
  EXPECT_EQ(LastPushAck(*a_push_out).status_code(), 0);
  EXPECT_EQ(credit_messages(), 1u);
  // 100 used, a quarter: topped up to 400 again in one message.
  a_push->Handle(PushMsg(2, Key(0, 1, 0, v1::FORWARD), std::string(50, 'y')));
  EXPECT_EQ(LastPushAck(*a_push_out).status_code(), 0);
  EXPECT_EQ(credit_messages(), 2u);
  EXPECT_EQ(CreditGranted(*a_push_out), 500u);
  EXPECT_EQ(core_->mailbox().GetStats().credit_bytes, 400u);
}

TEST_F(ExchangeSessionTest, ClosingReturnsReservationsAndCancelsPulls) {
  std::shared_ptr<FakeChannel> a_out, b_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  v1::SiteMessage first = PushMsg(1, Key(0, 0, 0, v1::FORWARD), "abc");
  first.mutable_push()->mutable_header()->set_wire_bytes(300);
  first.mutable_push()->mutable_header()->set_chunk_count(2);
  Offer(*a, *a_out, 1, Key(0, 0, 0, v1::FORWARD), 300);
  a->Handle(first);  // incomplete transfer: 300 bytes reserved
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 300u);
  b->Handle(PullMsg(1, Key(0, 3, 0, v1::FORWARD)));
  a->Close();
  b->Close();
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 0u);
  EXPECT_EQ(core_->mailbox().GetStats().waiting_pulls, 0u);
  EXPECT_EQ(core_->Snapshot().view().sites(0).state(), v1::SITE_DOWN);
}

TEST_F(ExchangeSessionTest, RejoinReplacesTheOldStreamAndTellsNeighboursTheNewKey) {
  std::shared_ptr<FakeChannel> a_out, b_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  auto reply = core_->federation().Join("a", JoinRequestFor(spec_, 0, 2), Federation::Clock::now());
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(a_out->closed().code(), absl::StatusCode::kAborted);
  ASSERT_FALSE(b_out->messages().empty());
  EXPECT_EQ(b_out->messages().back().control().neighbour_key().epoch(), 2u);
  ASSERT_EQ(reply->neighbour_keys_size(), 1);
  EXPECT_EQ(reply->neighbour_keys(0).site_id(), "b");
  // An old epoch cannot join again.
  EXPECT_EQ(core_->federation()
                .Join("a", JoinRequestFor(spec_, 0, 2), Federation::Clock::now())
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ExchangeSessionTest, JoinChecksClaimsAgainstTheJobSpec) {
  v1::JoinRequest wrong_layers = JoinRequestFor(spec_, 0, 1);
  wrong_layers.mutable_layers()->set_end(2);
  EXPECT_EQ(core_->federation().Join("a", wrong_layers, Federation::Clock::now()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  v1::JoinRequest other_federation = JoinRequestFor(spec_, 0, 1);
  other_federation.set_federation("other");
  EXPECT_FALSE(core_->federation().Join("a", other_federation, Federation::Clock::now()).ok());
  EXPECT_EQ(core_->federation()
                .Join("mallory", JoinRequestFor(spec_, 0, 1), Federation::Clock::now())
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(core_->federation()
                .Join("b", JoinRequestFor(spec_, 0, 1), Federation::Clock::now())
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);  // b claims a's layers
  // A site whose copy of the job spec trains something else is refused, the difference named.
  JobSpec other_lr = spec_;
  other_lr.training.optimizer.lr = 0.5;
  absl::Status refused = core_->federation()
                             .Join("a", JoinRequestFor(other_lr, 0, 1), Federation::Clock::now())
                             .status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("training.optimizer.lr: 0.5 (the gateway's: "),
            std::string::npos)
      << refused;
  // The sites of one run train as many steps: the first to join sets it.
  v1::JoinRequest a = JoinRequestFor(spec_, 0, 1), b = JoinRequestFor(spec_, 1, 1);
  a.set_total_steps(100);
  b.set_total_steps(200);
  ASSERT_TRUE(core_->federation().Join("a", a, Federation::Clock::now()).ok());
  refused = core_->federation().Join("b", b, Federation::Clock::now()).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(
      refused.message().find("site 'b' trains 200 steps; site 'a' of the run under way trains "
                             "100: start every strait-site with the same --steps"),
      std::string::npos)
      << refused;
  b.set_total_steps(100);
  EXPECT_TRUE(core_->federation().Join("b", b, Federation::Clock::now()).ok());
}

TEST_F(ExchangeSessionTest, PushStreamCarriesOnlyPushesAndDoesNotReplaceThePrimary) {
  std::shared_ptr<FakeChannel> a_out, b_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  auto push_out = std::make_shared<FakeChannel>();
  ExchangeSession pusher(*core_, "a", push_out);
  v1::SiteMessage hello = Hello(1);
  hello.mutable_hello()->set_push_only(true);
  pusher.Handle(hello);
  Offer(pusher, *push_out, 1, Key(0, 0, 0, v1::FORWARD), 1);
  pusher.Handle(PushMsg(1, Key(0, 0, 0, v1::FORWARD), "x"));
  EXPECT_EQ(LastPushAck(*push_out).status_code(), 0);
  pusher.Handle(PullMsg(1, Key(0, 0, 1, v1::BACKWARD)));  // not on this stream
  EXPECT_EQ(push_out->messages().back().error().status_code(),
            static_cast<int>(absl::StatusCode::kInvalidArgument));
  pusher.Close();  // closing the push stream does not take the site down
  EXPECT_EQ(core_->Snapshot().view().sites(0).state(), v1::SITE_JOINED);
  // Control messages still reach the primary stream.
  ASSERT_TRUE(
      core_->federation().Join("b", JoinRequestFor(spec_, 1, 2), Federation::Clock::now()).ok());
  EXPECT_EQ(a_out->messages().back().control().neighbour_key().site_id(), "b");
}

TEST_F(ExchangeSessionTest, SilentSiteIsMarkedDownAndOthersAreTold) {
  spec_.gateway.heartbeat_timeout_s = 1;
  std::shared_ptr<FakeChannel> a_out, b_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  const auto later = Federation::Clock::now() + std::chrono::seconds(2);
  core_->federation().Touch(1, later);  // b keeps talking, a is silent
  core_->federation().CheckHeartbeats(later);
  v1::FederationState state = core_->Snapshot();
  EXPECT_EQ(state.view().sites(0).state(), v1::SITE_DOWN);
  EXPECT_EQ(state.view().sites(1).state(), v1::SITE_JOINED);
  EXPECT_EQ(a_out->closed().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(b_out->messages().back().control().site_down().site_id(), "a");
}

TEST_F(ExchangeSessionTest, FinishedSiteIsDoneNotDownWhenItsStreamEnds) {
  std::shared_ptr<FakeChannel> a_out, b_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  v1::SiteMessage last;
  last.mutable_report()->set_step(7);
  last.mutable_report()->set_finished(true);
  a->Handle(last);
  a->Close();
  v1::FederationState state = core_->Snapshot();
  EXPECT_EQ(state.view().sites(0).state(), v1::SITE_DONE);
  EXPECT_EQ(state.view().sites(0).step(), 7u);
  for (const v1::GatewayMessage& m : b_out->messages()) EXPECT_FALSE(m.control().has_site_down());

  // A site that leaves without finishing is down, and its neighbours are told.
  b->Close();
  EXPECT_EQ(core_->Snapshot().view().sites(1).state(), v1::SITE_DOWN);
}

TEST_F(ExchangeSessionTest, TrainingStartsOnceEverySiteIsAttached) {
  std::shared_ptr<FakeChannel> a_out, b_out, c_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  EXPECT_TRUE(Rollbacks(*a_out).empty());
  auto c = Open(2, c_out);
  for (FakeChannel* out : {a_out.get(), b_out.get(), c_out.get()}) {
    ASSERT_EQ(Rollbacks(*out).size(), 1u);
    EXPECT_EQ(Rollbacks(*out)[0].step(), 0u);
    EXPECT_EQ(Rollbacks(*out)[0].generation(), 1u);
  }
  EXPECT_EQ(core_->Snapshot().view().generation(), 1u);
}

// A planned split: every Rollback says every site's layers, and a re-plan (SetSplit) changes them
// from the next one on; joins may claim the layers of either split, and MOVE frames go from one
// site to any other.
TEST_F(ExchangeSessionTest, APlannedSplitTravelsWithTheRollbackAndMayChange) {
  for (SiteSpec& site : spec_.sites) site.plan_layers = true;  // layers: auto, planned.
  view_.planned = true;
  core_ = std::make_unique<GatewayCore>(spec_, view_, GatewayOptions{});
  std::vector<std::shared_ptr<FakeChannel>> out(3);
  std::vector<std::unique_ptr<ExchangeSession>> sessions;
  for (int i = 0; i < 3; ++i) sessions.push_back(Open(i, out[i]));
  auto split_of = [](const v1::Rollback& r) {
    std::vector<LayerRange> split;
    for (const v1::LayerRange& l : r.split()) {
      split.push_back({static_cast<int>(l.start()), static_cast<int>(l.end())});
    }
    return split;
  };
  const std::vector<LayerRange> first = {{0, 1}, {1, 2}, {2, 3}};
  ASSERT_EQ(Rollbacks(*out[0]).size(), 1u);
  EXPECT_EQ(split_of(Rollbacks(*out[0])[0]), first);

  const std::vector<LayerRange> second = {{0, 2}, {2, 3}, {3, 3}};
  EXPECT_FALSE(core_->federation().SetSplit({{0, 3}}).ok());  // Not a range per site.
  ASSERT_TRUE(core_->federation().SetSplit(second).ok());
  sessions[1]->Close();
  v1::JoinRequest old_claim = JoinRequestFor(spec_, view_, 1, 2);  // [1, 2): before the re-plan.
  ASSERT_TRUE(
      core_->federation().Join(spec_.sites[1].id, old_claim, Federation::Clock::now()).ok());
  out[1] = std::make_shared<FakeChannel>();
  sessions[1] = std::make_unique<ExchangeSession>(*core_, spec_.sites[1].id, out[1]);
  sessions[1]->Handle(Hello(2));
  for (auto& channel : out) {
    ASSERT_FALSE(Rollbacks(*channel).empty());
    EXPECT_EQ(split_of(Rollbacks(*channel).back()), second);
  }
  // Stage 2 sends stage 0 its layers: a MOVE frame from one site to a non-neighbour.
  v1::TensorKey move = Key(/*step=*/0, /*microbatch=*/0, /*boundary=*/2, v1::FORWARD, 2);
  move.set_purpose(v1::MOVE);
  Offer(*sessions[2], *out[2], 7, move, 4);
  sessions[2]->Handle(PushMsg(7, move, "part"));
  EXPECT_EQ(LastPushAck(*out[2]).status_code(), 0) << LastPushAck(*out[2]).DebugString();
  sessions[1]->Handle(PullMsg(1, move));  // Not stage 1's to pull.
  EXPECT_TRUE(out[1]->frames().empty());
  sessions[0]->Handle(PullMsg(2, move));
  ASSERT_EQ(out[0]->frames().size(), 1u);
  EXPECT_EQ(out[0]->frames()[0].second->chunk(0), "part");
  EXPECT_EQ(core_->Snapshot().links_size(), 0);  // On no boundary's account.
}

TEST_F(ExchangeSessionTest, AfterEverySiteFinishedTheNextJoinsStartANewRun) {
  std::vector<std::shared_ptr<FakeChannel>> out(3);
  std::vector<std::unique_ptr<ExchangeSession>> sessions;
  for (int i = 0; i < 3; ++i) sessions.push_back(Open(i, out[i]));
  v1::SiteMessage done;
  done.mutable_report()->set_step(50);
  done.mutable_report()->set_finished(true);
  for (auto& session : sessions) {
    session->Handle(done);
    session->Close();
  }
  for (int i = 0; i < 3; ++i) sessions[i] = Open(i, out[i], /*epoch=*/2);
  for (auto& channel : out) {
    ASSERT_EQ(Rollbacks(*channel).size(), 1u);
    EXPECT_EQ(Rollbacks(*channel)[0].step(), 0u);
    EXPECT_EQ(Rollbacks(*channel)[0].generation(), 2u);  // Nothing of the first run answers it.
  }
}

TEST_F(ExchangeSessionTest, AFailedSitePausesTheOthersAndItsReturnRollsEveryoneBack) {
  std::shared_ptr<FakeChannel> a_out, b_out, c_out;
  auto a = Open(0, a_out);
  auto b = Open(1, b_out);
  auto c = Open(2, c_out);
  auto report = [](uint64_t step, uint64_t checkpoint) {
    v1::SiteMessage m;
    m.mutable_report()->set_step(step);
    m.mutable_report()->set_generation(1);
    m.mutable_report()->set_has_checkpoint(true);
    m.mutable_report()->set_checkpoint_step(checkpoint);
    return m;
  };
  a->Handle(report(23, 20));
  c->Handle(report(21, 10));  // c has not written step 20 yet.
  // A frame of generation 1 in flight when b fails.
  Offer(*a, *a_out, 1, Key(21, 0, 0, v1::FORWARD, 1), 1);
  a->Handle(PushMsg(1, Key(21, 0, 0, v1::FORWARD, 1), "x"));
  EXPECT_EQ(core_->mailbox().GetStats().stored_frames, 1u);

  b->Close();
  for (FakeChannel* out : {a_out.get(), c_out.get()}) {
    ASSERT_FALSE(out->messages().empty());
    EXPECT_TRUE(out->messages().back().control().has_pause())
        << out->messages().back().DebugString();
  }
  // b comes back with its newest checkpoint: everyone goes back to the newest step all hold.
  auto b2 = Open(1, b_out, /*epoch=*/2, /*checkpoint=*/20);
  for (FakeChannel* out : {a_out.get(), b_out.get(), c_out.get()}) {
    ASSERT_FALSE(Rollbacks(*out).empty());
    EXPECT_EQ(Rollbacks(*out).back().step(), 10u);
    EXPECT_EQ(Rollbacks(*out).back().generation(), 2u);
  }
  // The old generation's frames are gone, and a late push of one is dropped: its offer is
  // acknowledged without a grant, so no body follows.
  EXPECT_EQ(core_->mailbox().GetStats().stored_frames, 0u);
  a->Handle(OfferMsg(2, Key(22, 0, 0, v1::FORWARD, 1), 1));
  EXPECT_EQ(LastPushAck(*a_out).transfer_id(), 2u);
  EXPECT_EQ(LastPushAck(*a_out).status_code(), 0);
  EXPECT_EQ(Grants(*a_out), std::vector<uint64_t>{1});
  EXPECT_EQ(core_->mailbox().GetStats().stored_frames, 0u);
  EXPECT_EQ(core_->mailbox().GetStats().reserved_bytes, 0u);

  // The first step trained after the rollback reports how long the return took.
  v1::SiteMessage resumed = report(11, 10);
  resumed.mutable_report()->set_generation(2);
  c->Handle(resumed);
  bool alerted = false;
  const v1::FederationState state = core_->Snapshot();
  for (const v1::Alert& alert : state.alerts()) {
    alerted |= alert.message().find("training resumed") != std::string::npos;
  }
  EXPECT_TRUE(alerted);
}

}  // namespace
}  // namespace strait::gateway
