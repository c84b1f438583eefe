#include "site/rpc/gateway_client.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/frame_header.h"

namespace strait::site {
namespace {

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace

GatewayClient::GatewayClient(Options options)
    : options_(std::move(options)), control_handler_(options_.on_control) {}

absl::StatusOr<std::unique_ptr<GatewayClient>> GatewayClient::Connect(Options options,
                                                                      const v1::JoinRequest& join) {
  std::unique_ptr<GatewayClient> client(new GatewayClient(std::move(options)));
  if (absl::Status s = client->Start(join); !s.ok()) return s;
  return client;
}

absl::Status GatewayClient::Start(const v1::JoinRequest& join) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(kMaxChunkBytes + (64 << 10)));
  args.SetMaxSendMessageSize(static_cast<int>(kMaxChunkBytes + (64 << 10)));
  stub_ =
      v1::Gateway::NewStub(grpc::CreateCustomChannel(options_.address, options_.credentials, args));

  grpc::ClientContext join_context;
  join_context.set_deadline(std::chrono::system_clock::now() + options_.join_timeout);
  join_context.set_wait_for_ready(true);  // The gateway may still be starting.
  grpc::Status joined = stub_->Join(&join_context, join, &join_reply_);
  if (!joined.ok()) {
    return absl::Status(
        FromGrpc(joined).code(),
        absl::StrCat("joining the gateway at ", options_.address, ": ", joined.error_message()));
  }

  primary_ = stub_->Exchange(&primary_context_);
  push_ = stub_->Exchange(&push_context_);
  v1::SiteMessage hello;
  hello.mutable_hello()->set_epoch(join_reply_.epoch());
  if (!primary_->Write(hello))
    return absl::UnavailableError("the gateway closed the primary stream");
  hello.mutable_hello()->set_push_only(true);
  hello.mutable_hello()->set_credit(true);
  if (!push_->Write(hello)) return absl::UnavailableError("the gateway closed the push stream");

  primary_reader_ = std::thread([this] { ReadPrimary(); });
  push_reader_ = std::thread([this] { ReadPushAcks(); });
  heartbeat_ = std::thread([this] { Heartbeats(); });
  // The gateway answers the push stream's Hello with our initial credit: waiting for it here (one
  // round trip, like the Join) spares the first push an offer and its round trip. Without it (the
  // budget has no room yet, or the answer is late) pushes simply start by offering.
  std::unique_lock<std::mutex> lock(mu_);
  push_cv_.wait_for(lock, options_.join_timeout,
                    [this] { return credit_answered_ || push_ended_; });
  return absl::OkStatus();
}

GatewayClient::~GatewayClient() { (void)Close(); }

std::future<absl::Status> GatewayClient::Push(v1::FrameHeader header, std::string body) {
  std::promise<absl::Status> promise;
  std::future<absl::Status> future = promise.get_future();
  // The gateway forwards each piece as it arrives.
  const FramePieces pieces = CutIntoPieces(body.size(), options_.chunk_bytes);
  header.set_wire_bytes(body.size());
  header.set_chunk_count(pieces.count);
  uint64_t transfer_id;
  bool funded;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || push_ended_) {
      promise.set_value(absl::UnavailableError("the connection to the gateway is closed"));
      return future;
    }
    transfer_id = next_id_++;
    pending_pushes_.emplace(transfer_id, std::move(promise));
    // Credit is used from the moment we decide to send: the gateway counts it when chunk 0 arrives,
    // which is after this, so its count of our credit is never below ours.
    funded = push_credit_ >= body.size();
    if (funded) {
      push_credit_ -= body.size();
    } else {
      offers_[transfer_id] = OfferState::kWaiting;
    }
  }
  if (!funded) {
    v1::SiteMessage offer;
    offer.mutable_offer()->set_transfer_id(transfer_id);
    *offer.mutable_offer()->mutable_header() = header;
    bool written;
    {
      std::lock_guard<std::mutex> write_lock(push_write_mu_);
      written = push_->Write(offer);
    }
    std::unique_lock<std::mutex> lock(mu_);
    // Flow control: wait here until the gateway has room for the body.
    push_cv_.wait(lock, [&] {
      return !written || closed_ || push_ended_ || offers_[transfer_id] != OfferState::kWaiting;
    });
    const bool granted = written && offers_[transfer_id] == OfferState::kGranted && !closed_;
    offers_.erase(transfer_id);
    // Not granted: a PushAck answered the offer, or the stream ended (the reader fails the push).
    if (!granted) return future;
  }
  std::lock_guard<std::mutex> write_lock(push_write_mu_);
  for (uint32_t i = 0; i < pieces.count; ++i) {
    v1::SiteMessage message;
    v1::PushChunk& push = *message.mutable_push();
    push.set_transfer_id(transfer_id);
    if (i == 0) *push.mutable_header() = header;
    push.mutable_chunk()->set_index(i);
    push.mutable_chunk()->set_data(
        body.substr(std::min<size_t>(body.size(), i * pieces.bytes), pieces.bytes));
    if (!push_->Write(message)) break;  // The reader fails the pending push when the stream ends.
  }
  return future;
}

std::future<absl::StatusOr<ReceivedFrame>> GatewayClient::Pull(const v1::TensorKey& key,
                                                               std::chrono::milliseconds timeout) {
  v1::SiteMessage message;
  std::future<absl::StatusOr<ReceivedFrame>> future;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t pull_id = next_id_++;
    PendingPull& pending = pending_pulls_[pull_id];
    future = pending.promise.get_future();
    if (closed_ || primary_ended_) {
      pending.promise.set_value(absl::UnavailableError("the connection to the gateway is closed"));
      pending_pulls_.erase(pull_id);
      return future;
    }
    v1::Pull& pull = *message.mutable_pull();
    pull.set_pull_id(pull_id);
    *pull.mutable_key() = key;
    pull.set_timeout_ms(static_cast<uint32_t>(timeout.count()));
  }
  WritePrimary(message);
  return future;
}

void GatewayClient::Ack(const v1::TensorKey& key) {
  v1::SiteMessage message;
  *message.mutable_ack()->mutable_key() = key;
  WritePrimary(message);
}

void GatewayClient::Report(const v1::SiteReport& report) {
  v1::SiteMessage message;
  *message.mutable_report() = report;
  WritePrimary(message);
}

void GatewayClient::OnControl(std::function<void(const v1::Control&)> handler) {
  std::lock_guard<std::mutex> lock(mu_);
  control_handler_ = std::move(handler);
}

bool GatewayClient::WritePrimary(const v1::SiteMessage& message) {
  std::lock_guard<std::mutex> lock(primary_write_mu_);
  return primary_->Write(message);
}

void GatewayClient::ReadPrimary() {
  v1::GatewayMessage message;
  while (primary_->Read(&message)) {
    switch (message.kind_case()) {
      case v1::GatewayMessage::kDeliver:
        HandleDeliver(*message.mutable_deliver());
        break;
      case v1::GatewayMessage::kControl: {
        std::function<void(const v1::Control&)> handler;
        {
          std::lock_guard<std::mutex> lock(mu_);
          handler = control_handler_;
        }
        if (handler) handler(message.control());
        break;
      }
      case v1::GatewayMessage::kError:
        ++stream_errors_;
        spdlog::warn("gateway refused a message: {}", message.error().message());
        break;
      default:
        break;
    }
  }
  const absl::Status lost = absl::UnavailableError("the gateway closed the stream");
  NotifyDisconnect(lost);
  {
    std::lock_guard<std::mutex> lock(mu_);
    primary_ended_ = true;  // Later pulls fail at once rather than wait for a Deliver.
  }
  FailPending(lost);
}

void GatewayClient::NotifyDisconnect(const absl::Status& status) {
  // Both readers come here; the second waits until the first has told the owner, so that no pull or
  // push fails (on either stream) before the owner knows the loss is why.
  std::call_once(disconnect_once_, [&] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return;  // Close() ended the streams: not a loss.
    }
    if (options_.on_disconnect) options_.on_disconnect(status);
  });
}

void GatewayClient::HandleDeliver(v1::Deliver& deliver) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_pulls_.find(deliver.pull_id());
  if (it == pending_pulls_.end()) return;  // Not ours (or already failed): ignore.
  PendingPull& pending = it->second;
  auto fail = [&](absl::Status status) {
    pending.promise.set_value(std::move(status));
    pending_pulls_.erase(it);
  };
  if (deliver.status_code() != 0) {
    return fail(absl::Status(static_cast<absl::StatusCode>(deliver.status_code()),
                             deliver.status_message()));
  }
  if (deliver.restart()) {
    // The producer's push broke off mid-frame; the gateway delivers its next push from chunk 0.
    pending.frame = ReceivedFrame{};
    pending.next_chunk = 0;
    return;
  }
  if (deliver.chunk().index() != pending.next_chunk) {
    return fail(absl::DataLossError(absl::StrCat("delivery of pull ", deliver.pull_id(),
                                                 " skipped from chunk ", pending.next_chunk, " to ",
                                                 deliver.chunk().index())));
  }
  if (pending.next_chunk == 0) {
    pending.frame.header = std::move(*deliver.mutable_header());
    if (pending.frame.header.wire_bytes() > options_.max_frame_bytes ||
        pending.frame.header.chunk_count() == 0) {
      return fail(absl::DataLossError("delivered frame header has an impossible size"));
    }
    pending.frame.body.reserve(pending.frame.header.wire_bytes());
  }
  ++pending.next_chunk;
  pending.frame.body += deliver.chunk().data();
  if (pending.frame.body.size() > pending.frame.header.wire_bytes()) {
    return fail(absl::DataLossError("delivered frame is longer than its header says"));
  }
  if (pending.next_chunk < pending.frame.header.chunk_count()) return;
  if (pending.frame.body.size() != pending.frame.header.wire_bytes()) {
    return fail(absl::DataLossError("delivered frame is shorter than its header says"));
  }
  pending.promise.set_value(std::move(pending.frame));
  pending_pulls_.erase(it);
}

void GatewayClient::ReadPushAcks() {
  v1::GatewayMessage message;
  while (push_->Read(&message)) {
    if (message.has_error()) {
      ++stream_errors_;
      spdlog::warn("gateway refused a push message: {}", message.error().message());
      continue;
    }
    if (message.has_push_credit()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        push_credit_ += message.push_credit().bytes();
        credit_answered_ = true;
      }
      push_cv_.notify_all();
      continue;
    }
    if (message.has_push_grant()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = offers_.find(message.push_grant().transfer_id());
        if (it != offers_.end()) it->second = OfferState::kGranted;
      }
      push_cv_.notify_all();
      continue;
    }
    if (!message.has_push_ack()) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (auto offer = offers_.find(message.push_ack().transfer_id()); offer != offers_.end()) {
      offer->second = OfferState::kAnswered;
      push_cv_.notify_all();
    }
    auto it = pending_pushes_.find(message.push_ack().transfer_id());
    if (it == pending_pushes_.end()) continue;
    it->second.set_value(
        absl::Status(static_cast<absl::StatusCode>(message.push_ack().status_code()),
                     message.push_ack().status_message()));
    pending_pushes_.erase(it);
  }
  const absl::Status lost = absl::UnavailableError("the gateway closed the push stream");
  NotifyDisconnect(lost);  // Before push_ended_ fails new pushes.
  {
    std::lock_guard<std::mutex> lock(mu_);
    push_ended_ = true;
  }
  push_cv_.notify_all();
  FailPending(lost);
}

void GatewayClient::Heartbeats() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!heartbeat_cv_.wait_for(lock, options_.heartbeat, [this] { return closed_; })) {
    lock.unlock();
    v1::SiteMessage message;
    message.mutable_heartbeat()->set_sent_unix_ms(
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count());
    WritePrimary(message);
    lock.lock();
  }
}

void GatewayClient::FailPending(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, promise] : pending_pushes_) promise.set_value(status);
  pending_pushes_.clear();
  for (auto& [id, pull] : pending_pulls_) pull.promise.set_value(status);
  pending_pulls_.clear();
}

absl::Status GatewayClient::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || primary_ == nullptr) return absl::OkStatus();
    closed_ = true;
  }
  heartbeat_cv_.notify_all();
  push_cv_.notify_all();  // Pushes waiting for a grant give up.
  if (heartbeat_.joinable()) heartbeat_.join();
  {
    std::lock_guard<std::mutex> lock(primary_write_mu_);
    primary_->WritesDone();
  }
  {
    std::lock_guard<std::mutex> lock(push_write_mu_);
    push_->WritesDone();
  }
  if (primary_reader_.joinable()) primary_reader_.join();
  if (push_reader_.joinable()) push_reader_.join();
  absl::Status status = FromGrpc(primary_->Finish());
  (void)push_->Finish();
  return status;
}

}  // namespace strait::site
