// The gateway as a real process on loopback, driven by gRPC clients acting as sites: frames pushed,
// pulled and acknowledged end to end, long polls, authorization, malformed and unfunded messages,
// and back-pressure under a small memory budget.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <deque>
#include <fstream>
#include <memory>
#include <thread>

#include "harness/subprocess.h"
#include "harness/test_certificates.h"
#include "site/rpc/tls_credentials.h"
#include "strait/v1/gateway.grpc.pb.h"
#include "tests/integration/loopback_socket.h"

namespace strait {
namespace {

using harness::Process;
using harness::TempDir;

constexpr size_t kChunk = 1 << 20;

// A job whose first boundary carries `width` floats per sample in microbatches of 16 samples, so
// frames of up to 64 x width bytes are legitimate.
std::string SpecText(const std::string& budget, int width) {
  return R"(name: relay-test
gateway: {memory_budget: )" +
         budget + R"(, heartbeat_timeout: 30s}
model: {family: mlp, input: 16, hidden: [)" +
         std::to_string(width) + R"(, 8], classes: 4}
data: {dataset: synthetic}
training: {steps: 1, global_batch: 64, microbatches: 4}
sites:
  - {id: a, layers: [0, 1]}
  - {id: b, layers: [1, 2]}
  - {id: c, layers: [2, 3]}
)";
}

v1::TensorKey Key(uint32_t microbatch, uint32_t boundary, v1::Direction direction) {
  v1::TensorKey key;
  key.set_job("relay-test");
  key.set_step(0);
  key.set_microbatch(microbatch);
  key.set_boundary(boundary);
  key.set_direction(direction);
  return key;
}

// The sites' certificates (and "mallory"'s: a certificate of this federation for no site of the
// job), in <dir>/certs beside the job spec, which therefore needs no tls: block.
harness::TestCertificates Certificates(const harness::TempDir& dir) {
  absl::StatusOr<harness::TestCertificates> certs =
      harness::MakeCertificates(dir.File("certs"), {"a", "b", "c", "mallory"}, "relay-test");
  EXPECT_TRUE(certs.ok()) << certs.status();
  return certs.ok() ? *std::move(certs) : harness::TestCertificates{};
}

// One site's view of the gateway: joined over mutual TLS with its certificate, with an open
// Exchange stream.
class TestSite {
 public:
  TestSite(const harness::TestCertificates& certs, const std::string& address,
           const std::string& id, uint32_t stage, uint32_t epoch = 1)
      : id_(id) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(8 << 20);
    args.SetMaxSendMessageSize(8 << 20);
    absl::StatusOr<crypto::TlsMaterial> material = certs.Site(id);
    if (!material.ok()) {
      join_status_ = grpc::Status(grpc::StatusCode::UNAUTHENTICATED, material.status().ToString());
      return;
    }
    stub_ = v1::Gateway::NewStub(
        grpc::CreateCustomChannel(address, *site::MakeSiteChannelCredentials(*material), args));
    v1::JoinRequest request;
    request.set_federation("relay-test");
    request.mutable_layers()->set_start(stage);
    request.mutable_layers()->set_end(stage + 1);
    request.set_device("cpu");
    request.set_workers(1);
    request.mutable_key()->set_site_id(id);
    request.mutable_key()->set_epoch(epoch);
    grpc::ClientContext context;
    join_status_ = stub_->Join(&context, request, &reply_);
    if (!join_status_.ok()) return;
    // A reply that never comes fails the test instead of hanging it.
    stream_context_.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
    stream_ = stub_->Exchange(&stream_context_);
    v1::SiteMessage hello;
    hello.mutable_hello()->set_epoch(epoch);
    stream_->Write(hello);
  }

  ~TestSite() { Cancel(); }

  // Breaks the stream off, as a crash or a cut link would.
  void Cancel() {
    if (stream_ && !finished_) stream_context_.TryCancel();
    finished_ = true;
  }

  const grpc::Status& join_status() const { return join_status_; }

  // Pushes `body` under `key` in chunks of at most 1 MiB, only the chunks from `first` to before
  // `end` (all by default), following the credit protocol (gateway.proto, Hello): a transfer that
  // starts here is offered first and its body sent only after the gateway's grant. An offer
  // answered by a PushAck instead (refused, or the key is held) sends no body; ReadPushAck returns
  // that ack.
  void Push(uint64_t transfer, const v1::TensorKey& key, const std::string& body,
            size_t chunk_size = kChunk, uint32_t first = 0, uint32_t end = UINT32_MAX) {
    if (first == 0 && !Offer(transfer, HeaderOf(key, body, chunk_size))) return;
    PushUnfunded(transfer, key, body, chunk_size, first, end);
  }
  // The same chunks without an offer: as a site that ignores the credit protocol would send them.
  void PushUnfunded(uint64_t transfer, const v1::TensorKey& key, const std::string& body,
                    size_t chunk_size = kChunk, uint32_t first = 0, uint32_t end = UINT32_MAX) {
    const uint32_t chunks = std::max<size_t>(1, (body.size() + chunk_size - 1) / chunk_size);
    for (uint32_t i = first; i < std::min(chunks, end); ++i) {
      v1::SiteMessage m;
      v1::PushChunk& push = *m.mutable_push();
      push.set_transfer_id(transfer);
      if (i == 0) *push.mutable_header() = HeaderOf(key, body, chunk_size);
      push.mutable_chunk()->set_index(i);
      push.mutable_chunk()->set_data(body.substr(i * chunk_size, chunk_size));
      ASSERT_TRUE(stream_->Write(m));
    }
  }
  // Offers a frame and waits for the gateway's answer: true on its grant; false when a PushAck (or
  // the end of the stream) answered instead. Other messages read meanwhile wait for Read.
  bool Offer(uint64_t transfer, const v1::FrameHeader& header) {
    v1::SiteMessage m;
    m.mutable_offer()->set_transfer_id(transfer);
    *m.mutable_offer()->mutable_header() = header;
    Send(m);
    for (;;) {
      v1::GatewayMessage reply;
      if (!stream_->Read(&reply)) {
        pending_.emplace_back();  // Read reports the end of the stream.
        return false;
      }
      if (reply.has_push_grant() && reply.push_grant().transfer_id() == transfer) return true;
      pending_.push_back(reply);
      if (reply.has_push_ack() && reply.push_ack().transfer_id() == transfer) return false;
    }
  }
  void Send(const v1::SiteMessage& m) { ASSERT_TRUE(stream_->Write(m)); }
  void Pull(uint64_t pull_id, const v1::TensorKey& key, uint32_t timeout_ms = 0) {
    v1::SiteMessage m;
    m.mutable_pull()->set_pull_id(pull_id);
    *m.mutable_pull()->mutable_key() = key;
    m.mutable_pull()->set_timeout_ms(timeout_ms);
    Send(m);
  }
  void Ack(const v1::TensorKey& key) {
    v1::SiteMessage m;
    *m.mutable_ack()->mutable_key() = key;
    Send(m);
  }
  // Reads the next message (blocking).
  v1::GatewayMessage Read() {
    v1::GatewayMessage m;
    if (!pending_.empty()) {
      m = std::move(pending_.front());
      pending_.pop_front();
      EXPECT_NE(m.kind_case(), v1::GatewayMessage::KIND_NOT_SET) << id_ << ": stream ended";
      return m;
    }
    EXPECT_TRUE(stream_->Read(&m)) << id_ << ": stream ended";  // then m is empty
    return m;
  }
  // The next Deliver message (controls, e.g. a neighbour's new key, are skipped).
  v1::Deliver ReadDeliver() {
    for (;;) {
      v1::GatewayMessage m = Read();
      if (m.has_deliver() || m.kind_case() == v1::GatewayMessage::KIND_NOT_SET) return m.deliver();
    }
  }
  // Reads Deliver messages of one frame and returns its body (or the error status).
  std::string ReadFrame(int* status_code) {
    std::string body;
    for (;;) {
      v1::GatewayMessage m = Read();
      if (m.kind_case() == v1::GatewayMessage::KIND_NOT_SET) return "";  // stream ended
      if (!m.has_deliver()) continue;
      *status_code = m.deliver().status_code();
      if (*status_code != 0) return "";
      if (m.deliver().restart()) {
        body.clear();
        continue;
      }
      body += m.deliver().chunk().data();
      uint32_t chunks =
          m.deliver().chunk().index() == 0 ? m.deliver().header().chunk_count() : expected_chunks_;
      expected_chunks_ = chunks;
      if (m.deliver().chunk().index() + 1 == chunks) return body;
    }
  }
  // The next PushAck; a StreamError or the end of the stream is returned as a failed ack.
  v1::PushAck ReadPushAck() {
    for (;;) {
      v1::GatewayMessage m = Read();
      if (m.has_push_ack()) return m.push_ack();
      if (m.kind_case() == v1::GatewayMessage::KIND_NOT_SET || m.has_error()) {
        v1::PushAck failed;
        failed.set_status_code(m.has_error() ? m.error().status_code() : -1);
        failed.set_status_message(m.error().message());
        return failed;
      }
    }
  }
  v1::FederationState State() {
    grpc::ClientContext context;
    v1::FederationState state;
    EXPECT_TRUE(stub_->GetState(&context, v1::GetStateRequest(), &state).ok());
    return state;
  }
  void Finish() {
    stream_->WritesDone();
    v1::GatewayMessage m;
    while (stream_->Read(&m)) {
    }
    EXPECT_TRUE(stream_->Finish().ok());
    finished_ = true;
  }

 private:
  static v1::FrameHeader HeaderOf(const v1::TensorKey& key, const std::string& body,
                                  size_t chunk_size) {
    v1::FrameHeader h;
    *h.mutable_key() = key;
    h.set_dtype(v1::FLOAT32);
    h.add_shape(static_cast<int64_t>(body.size() / 4));
    h.set_raw_bytes(body.size() / 4 * 4);
    h.set_wire_bytes(body.size());
    h.set_chunk_count(std::max<size_t>(1, (body.size() + chunk_size - 1) / chunk_size));
    return h;
  }

  std::string id_;
  std::unique_ptr<v1::Gateway::Stub> stub_;
  v1::JoinReply reply_;
  grpc::Status join_status_;
  grpc::ClientContext stream_context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SiteMessage, v1::GatewayMessage>> stream_;
  uint32_t expected_chunks_ = 1;
  bool finished_ = false;
  std::deque<v1::GatewayMessage> pending_;  // Read while waiting for a grant (Offer).
};

class GatewayExchangeTest : public ::testing::Test {
 protected:
  void StartGateway(const std::string& budget, int width = 1 << 20) {
    std::ofstream(dir_.File("fed.yaml")) << SpecText(budget, width);
    gateway_ = std::make_unique<harness::Process>(
        std::vector<std::string>{std::string(STRAIT_BINARY_DIR) + "/gateway/strait-gateway",
                                 "--config", dir_.File("fed.yaml"), "--listen", "127.0.0.1:0",
                                 "--ready-file", dir_.File("ready"), "--dashboard", "127.0.0.1:0"},
        dir_.File("gateway.log"));
    auto ready =
        gateway_->WaitForReadyFile(dir_.File("ready"), {"grpc", "http"}, std::chrono::seconds(30));
    ASSERT_FALSE(ready.empty()) << gateway_->LogTail();
    address_ = "127.0.0.1:" + ready["grpc"];
    http_port_ = std::stoi(ready["http"]);
  }
  void TearDown() override {
    if (HasFailure() && gateway_) std::cerr << "gateway log:\n" << gateway_->LogTail() << "\n";
  }

  harness::TempDir dir_;
  const harness::TestCertificates certs_ = Certificates(dir_);
  std::unique_ptr<harness::Process> gateway_;
  std::string address_;
  int http_port_ = 0;  // The dashboard's: /metrics.
};

// The body of GET `path` from 127.0.0.1:`port` (the server closes after answering); "" when the
// connection fails.
std::string HttpGet(int port, const std::string& path) {
  const int fd = testing::ConnectLoopback(port);
  if (fd < 0) return "";
  std::string response;
  const std::string request =
      "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) response.append(buffer, n);
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

std::string Pattern(size_t bytes, char seed) {
  std::string s(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) s[i] = static_cast<char>(seed + i * 31 + (i >> 10));
  return s;
}

TEST_F(GatewayExchangeTest, SixteenMebibyteFrameTravelsInChunksAndIsAcknowledged) {
  StartGateway("128MiB");
  TestSite a(certs_, address_, "a", 0), b(certs_, address_, "b", 1);
  ASSERT_TRUE(a.join_status().ok()) << a.join_status().error_message();
  ASSERT_TRUE(b.join_status().ok());
  const std::string body = Pattern(16 << 20, 'q');
  a.Push(1, Key(0, 0, v1::FORWARD), body);
  v1::PushAck ack = a.ReadPushAck();
  EXPECT_EQ(ack.status_code(), 0) << ack.status_message();
  b.Pull(1, Key(0, 0, v1::FORWARD));
  int status = -1;
  std::string got = b.ReadFrame(&status);
  EXPECT_EQ(status, 0);
  EXPECT_TRUE(got == body) << "frame body differs (" << got.size() << " bytes)";
  b.Ack(Key(0, 0, v1::FORWARD));
  // The ack is processed asynchronously: poll the gateway's state until the mailbox is empty.
  v1::FederationState state;
  for (int i = 0; i < 100; ++i) {
    state = b.State();
    if (state.stored_bytes() == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(state.stored_bytes(), 0u);
  ASSERT_EQ(state.links_size(), 1);
  EXPECT_EQ(state.links(0).wire_bytes(), 16u << 20);
  EXPECT_EQ(state.view().sites(0).state(), v1::SITE_JOINED);
  a.Finish();
  b.Finish();
}

// Frames stream through the gateway: the consumer gets a frame's first chunk before its producer
// has sent the second, and when the producer dies mid-frame the consumer is told to restart and
// gets the frame whole from the producer's next push.
TEST_F(GatewayExchangeTest, FramesStreamThroughAndRestartWhenTheProducerDiesMidFrame) {
  StartGateway("128MiB");
  TestSite b(certs_, address_, "b", 1);
  const std::string body = Pattern(3 << 10, 's');
  const v1::TensorKey key = Key(0, 0, v1::FORWARD);
  b.Pull(1, key);
  {
    TestSite a(certs_, address_, "a", 0);
    a.Push(1, key, body, 1 << 10, 0, 1);  // chunk 0 of 3 only
    v1::Deliver first = b.ReadDeliver();
    EXPECT_EQ(first.chunk().index(), 0u);
    EXPECT_EQ(first.header().chunk_count(), 3u);
    EXPECT_TRUE(first.chunk().data() == body.substr(0, 1 << 10));
    a.Push(1, key, body, 1 << 10, 1, 2);  // chunk 1: forwarded as it arrives
    EXPECT_EQ(b.ReadDeliver().chunk().index(), 1u);
    a.Cancel();
  }
  v1::Deliver restart = b.ReadDeliver();
  EXPECT_TRUE(restart.restart());
  EXPECT_EQ(restart.pull_id(), 1u);
  TestSite a(certs_, address_, "a", 0, /*epoch=*/2);
  a.Push(2, key, body, 1 << 10);
  EXPECT_EQ(a.ReadPushAck().status_code(), 0);
  int status = -1;
  EXPECT_TRUE(b.ReadFrame(&status) == body);
  EXPECT_EQ(status, 0);
  b.Ack(key);
  a.Finish();
  b.Finish();
}

TEST_F(GatewayExchangeTest, PullWaitsForThePushAndTimesOutWhenNothingComes) {
  StartGateway("128MiB");
  TestSite b(certs_, address_, "b", 1), c(certs_, address_, "c", 2);
  c.Pull(5, Key(2, 1, v1::FORWARD));       // waits for b's push
  b.Pull(6, Key(3, 0, v1::FORWARD), 200);  // nobody pushes this: times out
  int status = -1;
  b.ReadFrame(&status);
  EXPECT_EQ(status, static_cast<int>(grpc::StatusCode::DEADLINE_EXCEEDED));
  b.Push(1, Key(2, 1, v1::FORWARD), "late-but-delivered");
  EXPECT_EQ(c.ReadFrame(&status), "late-but-delivered");
  EXPECT_EQ(status, 0);
}

TEST_F(GatewayExchangeTest, AuthorizationAndMalformedMessagesLeaveTheStreamHealthy) {
  StartGateway("128MiB");
  TestSite a(certs_, address_, "a", 0), c(certs_, address_, "c", 2);
  TestSite mallory(certs_, address_, "mallory", 0);
  EXPECT_EQ(mallory.join_status().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  c.Push(1, Key(0, 0, v1::FORWARD), "not-yours");  // c does not produce boundary 0
  EXPECT_EQ(c.ReadPushAck().status_code(), static_cast<int>(grpc::StatusCode::PERMISSION_DENIED));
  // A malformed transfer is refused once, with an ack naming it; its later chunks are dropped
  // quietly. Any other answer (an error per chunk) shows up below as an ack of the wrong transfer.
  a.PushUnfunded(2, Key(0, 0, v1::FORWARD), std::string(3 << 20, 'x'), 2 << 20);  // chunk 0 > 1 MiB
  v1::PushAck refused = a.ReadPushAck();
  EXPECT_EQ(refused.transfer_id(), 2u);
  EXPECT_EQ(refused.status_code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_NE(refused.status_message().find("at most"), std::string::npos)
      << refused.status_message();
  v1::SiteMessage oversized;  // A 1 GiB frame, over the limit this job allows: refused at chunk 0.
  v1::PushChunk& head = *oversized.mutable_push();
  head.set_transfer_id(3);
  *head.mutable_header()->mutable_key() = Key(2, 0, v1::FORWARD);
  head.mutable_header()->set_dtype(v1::FLOAT32);
  head.mutable_header()->add_shape(1 << 14);
  head.mutable_header()->add_shape(1 << 14);
  head.mutable_header()->set_raw_bytes(1ull << 30);
  head.mutable_header()->set_wire_bytes(1ull << 30);
  head.mutable_header()->set_chunk_count(1024);
  head.mutable_chunk()->set_data(std::string(kChunk, 'y'));
  a.Send(oversized);
  for (uint32_t i = 1; i < 4; ++i) {
    v1::SiteMessage next;
    next.mutable_push()->set_transfer_id(3);
    next.mutable_push()->mutable_chunk()->set_index(i);
    next.mutable_push()->mutable_chunk()->set_data(std::string(kChunk, 'y'));
    a.Send(next);
  }
  refused = a.ReadPushAck();
  EXPECT_EQ(refused.transfer_id(), 3u);
  EXPECT_NE(refused.status_message().find("exceeds the limit"), std::string::npos)
      << refused.status_message();
  EXPECT_EQ(refused.key().microbatch(), 2u);
  v1::SiteMessage bad_chunks;
  bad_chunks.mutable_push()->set_transfer_id(4);
  bad_chunks.mutable_push()->mutable_chunk()->set_index(4);  // never started
  a.Send(bad_chunks);
  refused = a.ReadPushAck();
  EXPECT_EQ(refused.transfer_id(), 4u);
  EXPECT_NE(refused.status_message().find("before chunk 0"), std::string::npos)
      << refused.status_message();
  a.Push(5, Key(1, 0, v1::FORWARD), "valid");
  v1::PushAck accepted = a.ReadPushAck();
  EXPECT_EQ(accepted.transfer_id(), 5u);
  EXPECT_EQ(accepted.status_code(), 0) << accepted.status_message();
  v1::FederationState state = a.State();
  EXPECT_GE(state.rejected_by_reason().at("unauthorized"), 1u);
  EXPECT_EQ(state.rejected_by_reason().at("malformed"), 3u);
}

// Admission has one path (gateway.proto, Hello): a body pushed with neither standing credit nor a
// grant is refused with FAILED_PRECONDITION, counted (also in /metrics), and the stream goes on.
TEST_F(GatewayExchangeTest, AnUnfundedPushIsRefusedCountedAndTheStreamStaysUsable) {
  StartGateway("128MiB");
  TestSite a(certs_, address_, "a", 0), b(certs_, address_, "b", 1);
  const v1::TensorKey key = Key(0, 0, v1::FORWARD);
  a.PushUnfunded(1, key, std::string(3 << 10, 'u'), 1 << 10);
  v1::PushAck refused = a.ReadPushAck();
  EXPECT_EQ(refused.transfer_id(), 1u);
  EXPECT_EQ(refused.status_code(), static_cast<int>(grpc::StatusCode::FAILED_PRECONDITION));
  EXPECT_NE(refused.status_message().find("offer the frame first"), std::string::npos)
      << refused.status_message();
  // The same frame, offered, travels; the refused transfer's later chunks were dropped quietly.
  a.Push(2, key, "funded-frame");
  v1::PushAck accepted = a.ReadPushAck();
  EXPECT_EQ(accepted.transfer_id(), 2u);
  EXPECT_EQ(accepted.status_code(), 0) << accepted.status_message();
  b.Pull(1, key);
  int status = -1;
  EXPECT_EQ(b.ReadFrame(&status), "funded-frame");
  EXPECT_EQ(status, 0);
  v1::FederationState state = a.State();
  EXPECT_EQ(state.rejected_by_reason().at("unfunded"), 1u);
  EXPECT_EQ(state.rejected_by_reason().count("malformed"), 0u);
  // The dashboard samples once a second: wait for the refusal to show.
  const std::string line = "strait_gateway_rejected_frames_by_reason_total{reason=\"unfunded\"} 1";
  std::string metrics;
  for (int i = 0; i < 100 && metrics.find(line) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    metrics = HttpGet(http_port_, "/metrics");
  }
  EXPECT_NE(metrics.find(line), std::string::npos) << metrics;
  a.Finish();
  b.Finish();
}

TEST_F(GatewayExchangeTest, SmallBudgetBlocksTheProducerUntilTheConsumerDrains) {
  StartGateway("3MiB", /*width=*/16384);  // frames of up to 1 MiB
  TestSite a(certs_, address_, "a", 0), b(certs_, address_, "b", 1);
  constexpr int kFrames = 4;
  std::thread producer([&] {
    for (int m = 0; m < kFrames; ++m)
      a.Push(m + 1, Key(m, 0, v1::FORWARD), Pattern(1 << 20, 'a' + m));
    for (int m = 0; m < kFrames; ++m) EXPECT_EQ(a.ReadPushAck().status_code(), 0);
  });
  // Give the producer time to fill the budget; the gateway must hold no more than it.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  v1::FederationState state = b.State();
  EXPECT_LE(state.stored_bytes(), 3u << 20);
  EXPECT_EQ(state.memory_budget_bytes(), 3u << 20);
  for (int m = 0; m < kFrames; ++m) {
    b.Pull(m, Key(m, 0, v1::FORWARD));
    int status = -1;
    EXPECT_TRUE(b.ReadFrame(&status) == Pattern(1 << 20, 'a' + m)) << "frame " << m;
    b.Ack(Key(m, 0, v1::FORWARD));
  }
  producer.join();
}

TEST_F(GatewayExchangeTest, StopsCleanlyOnSigterm) {
  StartGateway("128MiB");
  gateway_->Kill(SIGTERM);
  EXPECT_EQ(gateway_->Wait(std::chrono::seconds(10)), 0) << gateway_->LogTail();
}

}  // namespace
}  // namespace strait
