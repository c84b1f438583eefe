// The site's gRPC client against a real gateway process, over mutual TLS with real certificates:
// frames pushed and pulled through both streams, long polls and timeouts, refusals, control
// messages, and a clean close; and the connection that holds a client across joins.
#include "site/rpc/gateway_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <thread>
#include <vector>

#include "core/join_request.h"
#include "core/status.h"
#include "crypto/certificates.h"
#include "harness/subprocess.h"
#include "harness/test_certificates.h"
#include "site/rpc/gateway_connection.h"
#include "site/rpc/tls_credentials.h"

namespace strait::site {
namespace {

using strait::harness::Process;
using strait::harness::TempDir;

v1::TensorKey Key(uint32_t microbatch, uint32_t boundary, v1::Direction direction) {
  v1::TensorKey key;
  key.set_job("client-test");
  key.set_microbatch(microbatch);
  key.set_boundary(boundary);
  key.set_direction(direction);
  return key;
}

v1::FrameHeader Header(const v1::TensorKey& key, size_t floats) {
  v1::FrameHeader header;
  *header.mutable_key() = key;
  header.set_dtype(v1::FLOAT32);
  header.add_shape(static_cast<int64_t>(floats));
  header.set_raw_bytes(floats * 4);
  return header;
}

class GatewayClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // "z" has a valid certificate of this federation but is not a site of the job.
    absl::StatusOr<harness::TestCertificates> certs =
        harness::MakeCertificates(dir_.File("certs"), {"a", "b", "z"}, "client-test");
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = *std::move(certs);
    std::ofstream(dir_.File("fed.yaml")) << R"(name: client-test
gateway: {memory_budget: 256MiB}
model: {family: mlp, input: 16, hidden: [1048576, 8], classes: 4}
data: {dataset: synthetic}
training: {steps: 1, global_batch: 64, microbatches: 4}
sites:
  - {id: a, layers: [0, 1]}
  - {id: b, layers: [1, 3]}
)";
    std::vector<std::string> args = {std::string(STRAIT_BINARY_DIR) + "/gateway/strait-gateway",
                                     "-c",
                                     dir_.File("fed.yaml"),
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--ready-file",
                                     dir_.File("ready"),
                                     "--dashboard",
                                     "127.0.0.1:0"};
    spec_ = LoadJobSpec(dir_.File("fed.yaml"));
    ASSERT_TRUE(spec_.ok()) << spec_.status();
    gateway_ = std::make_unique<harness::Process>(args, dir_.File("gateway.log"));
    auto ready = gateway_->WaitForReadyFile(dir_.File("ready"), {"grpc"}, std::chrono::seconds(30));
    ASSERT_FALSE(ready.empty()) << gateway_->LogTail();
    address_ = "127.0.0.1:" + ready["grpc"];
  }

  // What site `id` claims when it joins with `epoch` (an unknown id claims the first site's
  // layers).
  v1::JoinRequest Join(const std::string& id, uint32_t epoch = 1) {
    return JoinRequestFor(*spec_, std::max(0, spec_->SiteIndex(id)), UnsignedKey(id, epoch));
  }

  absl::StatusOr<std::unique_ptr<GatewayClient>> Connect(
      const v1::JoinRequest& join,
      std::function<void(const absl::Status&)> on_disconnect = nullptr) {
    GatewayClient::Options options;
    options.on_disconnect = std::move(on_disconnect);
    options.address = address_;
    STRAIT_ASSIGN_OR_RETURN(const crypto::TlsMaterial material, certs_.Site(join.key().site_id()));
    STRAIT_ASSIGN_OR_RETURN(options.credentials, MakeSiteChannelCredentials(material));
    return GatewayClient::Connect(options, join);
  }

  harness::TempDir dir_;
  harness::TestCertificates certs_;
  absl::StatusOr<JobSpec> spec_;
  std::unique_ptr<harness::Process> gateway_;
  std::string address_;
};

TEST_F(GatewayClientTest, FramesTravelBothWays) {
  auto a = Connect(Join("a"));
  auto b = Connect(Join("b"));
  ASSERT_TRUE(a.ok()) << a.status() << gateway_->LogTail();
  ASSERT_TRUE(b.ok()) << b.status();
  auto pulled = (*b)->Pull(Key(0, 0, v1::FORWARD), std::chrono::seconds(10));  // before the push
  std::string activation(12 << 20, '\0');
  for (size_t i = 0; i < activation.size(); ++i) activation[i] = static_cast<char>(i * 7);
  EXPECT_TRUE(
      (*a)->Push(Header(Key(0, 0, v1::FORWARD), activation.size() / 4), activation).get().ok());
  absl::StatusOr<ReceivedFrame> frame = pulled.get();
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_TRUE(frame->body == activation);
  EXPECT_EQ(frame->header.wire_bytes(), activation.size());
  (*b)->Ack(Key(0, 0, v1::FORWARD));

  EXPECT_TRUE((*b)->Push(Header(Key(0, 0, v1::BACKWARD), 1), "grad").get().ok());
  frame = (*a)->Pull(Key(0, 0, v1::BACKWARD), std::chrono::seconds(10)).get();
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_EQ(frame->body, "grad");
  EXPECT_TRUE((*a)->Close().ok());
  EXPECT_TRUE((*b)->Close().ok());
}

TEST_F(GatewayClientTest, RefusalsAndTimeoutsAreStatuses) {
  auto a = Connect(Join("a"));
  ASSERT_TRUE(a.ok()) << a.status();
  v1::JoinRequest wrong_layers = Join("a", 2);
  wrong_layers.mutable_layers()->set_end(2);
  EXPECT_EQ(Connect(wrong_layers).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Connect(Join("z")).status().code(), absl::StatusCode::kPermissionDenied);
  // a does not produce BACKWARD tensors of boundary 0.
  EXPECT_EQ((*a)->Push(Header(Key(0, 0, v1::BACKWARD), 1), "xxxx").get().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(
      (*a)->Pull(Key(1, 0, v1::BACKWARD), std::chrono::milliseconds(100)).get().status().code(),
      absl::StatusCode::kDeadlineExceeded);
}

TEST_F(GatewayClientTest, PushesBeyondTheBudgetWaitForTheConsumerAndThenAllArrive) {
  auto a = Connect(Join("a"));
  auto b = Connect(Join("b"));
  ASSERT_TRUE(a.ok() && b.ok());
  // 16 frames of 24 MiB against a 256 MiB budget: standing credit carries the first ones, then each
  // push offers its frame and waits (in the site, blocked in Push) for the gateway's grant.
  constexpr int kFrames = 16;
  constexpr size_t kBytes = 24 << 20;
  auto key = [](int m) {
    v1::TensorKey k = Key(0, 0, v1::FORWARD);
    k.set_step(static_cast<uint64_t>(m));
    return k;
  };
  std::atomic<int> pushed{0};
  std::vector<std::future<absl::Status>> acks;
  std::thread producer([&] {
    for (int m = 0; m < kFrames; ++m) {
      std::string body(kBytes, static_cast<char>('a' + m));
      acks.push_back((*a)->Push(Header(key(m), kBytes / 4), std::move(body)));
      ++pushed;
    }
  });
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_LT(pushed.load(), kFrames) << "the producer was not held back by the budget";
  for (int m = 0; m < kFrames; ++m) {
    absl::StatusOr<ReceivedFrame> frame = (*b)->Pull(key(m), std::chrono::seconds(60)).get();
    ASSERT_TRUE(frame.ok()) << frame.status() << gateway_->LogTail();
    EXPECT_EQ(frame->body.size(), kBytes);
    EXPECT_EQ(frame->body[kBytes - 1], static_cast<char>('a' + m));
    (*b)->Ack(key(m));
  }
  producer.join();
  for (auto& ack : acks) EXPECT_TRUE(ack.get().ok());
  EXPECT_EQ((*a)->stream_errors(), 0u);
}

TEST_F(GatewayClientTest, NeighbourRejoinArrivesAsAControlMessage) {
  auto a = Connect(Join("a"));
  ASSERT_TRUE(a.ok());
  std::promise<v1::SignedKey> key_promise;
  (*a)->OnControl([&](const v1::Control& control) {
    if (control.has_neighbour_key()) key_promise.set_value(control.neighbour_key());
  });
  auto b = Connect(Join("b", /*epoch=*/7));
  ASSERT_TRUE(b.ok());
  auto future = key_promise.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(future.get().epoch(), 7u);
  EXPECT_EQ((*b)->join_reply().neighbour_keys_size(), 1);  // a's key
}

TEST_F(GatewayClientTest, PendingPullsFailWhenTheGatewayGoesAway) {
  auto b = Connect(Join("b"));
  ASSERT_TRUE(b.ok());
  auto pulled = (*b)->Pull(Key(0, 0, v1::FORWARD), std::chrono::seconds(60));
  gateway_->Kill(SIGKILL);
  ASSERT_EQ(pulled.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(pulled.get().status().code(), absl::StatusCode::kUnavailable);
}

// A site tells an interruption from a failure by what it heard first: every pull and push the loss
// fails, on either stream, fails only once on_disconnect has returned (here it takes 300 ms).
TEST_F(GatewayClientTest, WhatALossFailsFailsOnlyAfterTheLossWasHeard) {
  std::atomic<bool> heard{false};
  auto b = Connect(Join("b"), [&](const absl::Status&) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    heard = true;
  });
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<std::future<absl::StatusOr<ReceivedFrame>>> pulls;
  std::vector<std::future<absl::Status>> pushes;
  pulls.push_back((*b)->Pull(Key(0, 0, v1::FORWARD), std::chrono::seconds(60)));
  gateway_->Kill(SIGKILL);
  auto ready = [](auto& future) {
    return future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  };
  // Until the loss is heard, nothing may have failed (pushes made meanwhile included).
  int failed_early = 0;
  for (uint32_t i = 1; !heard; ++i) {
    pushes.push_back((*b)->Push(Header(Key(i, 0, v1::FORWARD), 1), "four"));
    const bool any_ready = std::any_of(pulls.begin(), pulls.end(), ready) ||
                           std::any_of(pushes.begin(), pushes.end(), ready);
    if (any_ready && !heard) ++failed_early;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(failed_early, 0) << "a pull or push failed before the loss was heard";
  for (auto& pull : pulls) EXPECT_EQ(pull.get().status().code(), absl::StatusCode::kUnavailable);
  for (auto& push : pushes) EXPECT_EQ(push.get().code(), absl::StatusCode::kUnavailable);
}

// A push that breaks off mid-frame (here: its producer skips a chunk): the gateway has streamed
// part of the frame to the consumer and tells it to restart; the pull then completes with the frame
// as its producer pushes it again, whole and intact.
TEST_F(GatewayClientTest, APullRestartsWhenItsFrameBreaksOffMidDelivery) {
  auto b = Connect(Join("b"));
  ASSERT_TRUE(b.ok()) << b.status();
  const v1::TensorKey key = Key(0, 0, v1::FORWARD);
  auto pulled = (*b)->Pull(key, std::chrono::seconds(60));
  std::string activation(96 << 10, '\0');
  for (size_t i = 0; i < activation.size(); ++i) activation[i] = static_cast<char>(i * 13);

  // A raw producer: site a's own gRPC stream, speaking the protocol message by message.
  absl::StatusOr<crypto::TlsMaterial> material = certs_.Site("a");
  ASSERT_TRUE(material.ok()) << material.status();
  auto stub =
      v1::Gateway::NewStub(grpc::CreateChannel(address_, *MakeSiteChannelCredentials(*material)));
  grpc::ClientContext join_context;
  v1::JoinReply reply;
  ASSERT_TRUE(stub->Join(&join_context, Join("a"), &reply).ok());
  grpc::ClientContext context;
  auto stream = stub->Exchange(&context);
  v1::SiteMessage message;
  message.mutable_hello()->set_epoch(reply.epoch());
  ASSERT_TRUE(stream->Write(message));
  v1::FrameHeader header = Header(key, activation.size() / 4);
  header.set_wire_bytes(activation.size());
  header.set_chunk_count(3);
  // Offers transfer `id` and waits for its grant (the credit protocol: gateway.proto, Hello).
  auto offer = [&](uint64_t id) {
    v1::SiteMessage m;
    m.mutable_offer()->set_transfer_id(id);
    *m.mutable_offer()->mutable_header() = header;
    if (!stream->Write(m)) return false;
    for (v1::GatewayMessage reply; stream->Read(&reply);) {
      if (reply.has_push_grant() && reply.push_grant().transfer_id() == id) return true;
    }
    return false;
  };
  // Transfer `id`'s chunk `index` of 3 (32 KiB each), carrying `data`.
  auto push = [&](uint64_t id, uint32_t index, std::string data) {
    v1::SiteMessage m;
    m.mutable_push()->set_transfer_id(id);
    if (index == 0) *m.mutable_push()->mutable_header() = header;
    m.mutable_push()->mutable_chunk()->set_index(index);
    m.mutable_push()->mutable_chunk()->set_data(std::move(data));
    return stream->Write(m);
  };
  ASSERT_TRUE(offer(1));
  ASSERT_TRUE(push(1, 0, std::string(32 << 10, 'x')));          // not what the good push sends
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // chunk 0 reaches the consumer
  ASSERT_TRUE(push(1, 2, std::string(32 << 10, 'x')));  // skips chunk 1: the transfer is dropped
  ASSERT_TRUE(offer(2));
  for (uint32_t i = 0; i < 3; ++i)
    ASSERT_TRUE(push(2, i, activation.substr(i * (32 << 10), 32 << 10)));
  ASSERT_EQ(pulled.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  absl::StatusOr<ReceivedFrame> frame = pulled.get();
  ASSERT_TRUE(frame.ok()) << frame.status() << gateway_->LogTail();
  EXPECT_TRUE(frame->body == activation);
  context.TryCancel();
}

TEST_F(GatewayClientTest, ACertificateOfAnotherFederationCannotJoin) {
  absl::StatusOr<harness::TestCertificates> other =
      harness::MakeCertificates(dir_.File("other"), {"a"}, "other");
  ASSERT_TRUE(other.ok()) << other.status();
  GatewayClient::Options options;
  options.address = address_;
  auto material = other->Site("a");
  ASSERT_TRUE(material.ok());
  options.credentials = *MakeSiteChannelCredentials(*material);
  options.join_timeout = std::chrono::seconds(3);
  EXPECT_FALSE(GatewayClient::Connect(options, Join("a")).ok());
}

// GatewayConnection (site/rpc/gateway_connection.h) over the same gateway: what a site's session
// holds across joins.
GatewayConnection::Options ConnectionOptions(const JobSpec& spec,
                                             const harness::TestCertificates& certs) {
  GatewayConnection::Options options;
  options.spec = &spec;
  options.index = spec.SiteIndex("b");
  options.total_steps = spec.training.steps;
  options.tls = *certs.Site("b");
  return options;
}

TEST_F(GatewayClientTest, AConnectionJoinsAgainAsANewEpochAndCloses) {
  JobSpec spec = *spec_;
  spec.gateway.address = address_;
  std::atomic<int> joining{0}, lost{0};
  ConnectionEvents events;
  events.joining = [&] { ++joining; };
  events.lost = [&](const absl::Status&) { ++lost; };
  GatewayConnection connection(ConnectionOptions(spec, certs_), events);
  // Before the join the link refuses, without blocking.
  EXPECT_EQ(connection.link().Push(Header(Key(0, 0, v1::BACKWARD), 1), "grad").get().code(),
            absl::StatusCode::kUnavailable);
  absl::StatusOr<v1::JoinReply> joined = connection.Join(std::nullopt);
  ASSERT_TRUE(joined.ok()) << joined.status() << gateway_->LogTail();
  EXPECT_EQ(joining, 1);
  EXPECT_NE(connection.security(), nullptr);  // Its link key is signed with the certificate.

  // Frames go through the link to the current client.
  auto a = Connect(Join("a"));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ((*a)->join_reply().neighbour_keys_size(), 1);
  const uint32_t first_epoch = (*a)->join_reply().neighbour_keys(0).epoch();
  // The gateway may re-send b's key of the first join; the rejoin's is newer.
  std::promise<v1::SignedKey> rejoined_key;
  std::atomic<bool> heard{false};
  (*a)->OnControl([&](const v1::Control& control) {
    if (control.has_neighbour_key() && control.neighbour_key().epoch() > first_epoch &&
        !heard.exchange(true)) {
      rejoined_key.set_value(control.neighbour_key());
    }
  });
  EXPECT_TRUE(connection.link().Push(Header(Key(0, 0, v1::BACKWARD), 1), "grad").get().ok());
  absl::StatusOr<ReceivedFrame> frame =
      (*a)->Pull(Key(0, 0, v1::BACKWARD), std::chrono::seconds(10)).get();
  ASSERT_TRUE(frame.ok()) << frame.status();
  EXPECT_EQ(frame->body, "grad");

  // Rejoin drops the connection and joins as a newer epoch, which the neighbour hears of.
  ASSERT_TRUE(connection.Rejoin(4).ok()) << gateway_->LogTail();
  EXPECT_EQ(joining, 2);
  auto key = rejoined_key.get_future();
  ASSERT_EQ(key.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(key.get().site_id(), "b");

  // Closing is no loss; afterwards the link refuses again.
  (void)connection.Close();
  EXPECT_EQ(connection.link().Push(Header(Key(1, 0, v1::BACKWARD), 1), "grad").get().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(lost, 0);
}

TEST_F(GatewayClientTest, AConnectionHearsOfItsLossAndGivesUpJoiningAgainAfterTheTimeout) {
  JobSpec spec = *spec_;
  spec.gateway.address = address_;
  std::promise<absl::Status> lost;
  ConnectionEvents events;
  events.lost = [&](const absl::Status& status) { lost.set_value(status); };
  GatewayConnection::Options options = ConnectionOptions(spec, certs_);
  options.reconnect_timeout_s = 1;
  options.join_timeout = std::chrono::seconds(1);
  GatewayConnection connection(std::move(options), events);
  ASSERT_TRUE(connection.Join(std::nullopt).ok()) << gateway_->LogTail();
  gateway_->Kill(SIGKILL);
  auto lost_status = lost.get_future();
  ASSERT_EQ(lost_status.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(lost_status.get().code(), absl::StatusCode::kUnavailable);
  const absl::StatusOr<v1::JoinReply> rejoined = connection.Rejoin(20);
  EXPECT_EQ(rejoined.status().code(), absl::StatusCode::kUnavailable);
  const std::string message(rejoined.status().message());
  EXPECT_EQ(message.rfind(
                "lost the gateway at " + address_ + " and could not join it again within 1 s (", 0),
            0u)
      << message;
  EXPECT_EQ(message.back(), '.') << message;
}

}  // namespace
}  // namespace strait::site
