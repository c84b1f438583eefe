#include "gateway/exchange/exchange_session.h"

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "core/frame_header.h"
#include "core/tensor_key.h"
#include "gateway/membership/authorizer.h"

namespace strait::gateway {
namespace {

constexpr size_t kMaxRefusedTransfers = 1024;

v1::GatewayMessage DeliverError(uint64_t pull_id, const absl::Status& status) {
  v1::GatewayMessage message;
  v1::Deliver& deliver = *message.mutable_deliver();
  deliver.set_pull_id(pull_id);
  deliver.set_status_code(static_cast<int>(status.code()));
  deliver.set_status_message(std::string(status.message()));
  return message;
}

}  // namespace

// Pulls still waiting in the mailbox, so Close can cancel them. Shared with the pull callbacks,
// which run on other threads, possibly before Mailbox::Pull has returned the mailbox's id: each
// pull is known by a session-local ticket from before the call.
class ExchangeSession::PullTracker {
 public:
  uint64_t NewTicket() {
    std::lock_guard<std::mutex> lock(mu_);
    return next_ticket_++;
  }
  // Mailbox::Pull returned `mailbox_id` for `ticket`.
  void Started(uint64_t ticket, uint64_t mailbox_id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_early_.erase(ticket) == 0) waiting_[ticket] = mailbox_id;
  }
  void Finished(uint64_t ticket) {
    std::lock_guard<std::mutex> lock(mu_);
    if (waiting_.erase(ticket) == 0) finished_early_.insert(ticket);
  }
  size_t waiting() {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_.size();
  }
  // The session closed: returns the pulls still waiting; no pull starts again from now on.
  std::map<uint64_t, uint64_t> Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    return std::exchange(waiting_, {});
  }
  bool closed() {
    std::lock_guard<std::mutex> lock(mu_);
    return closed_;
  }

 private:
  std::mutex mu_;
  uint64_t next_ticket_ = 0;
  std::map<uint64_t, uint64_t> waiting_;  // ticket -> mailbox pull id
  std::set<uint64_t> finished_early_;
  bool closed_ = false;
};

// Lets a reservation granted after the stream closed find out, and return its bytes.
struct ExchangeSession::Liveness {
  std::mutex mu;
  bool open = true;
};

ExchangeSession::ExchangeSession(GatewayCore& core, std::string site_id,
                                 std::shared_ptr<SiteChannel> channel)
    : core_(core),
      site_id_(std::move(site_id)),
      channel_(std::move(channel)),
      assembler_(core.spec(), core.options().max_frame_bytes,
                 core.options().max_open_transfers_per_stream),
      pulls_(std::make_shared<PullTracker>()),
      liveness_(std::make_shared<Liveness>()) {}

ExchangeSession::~ExchangeSession() { Close(); }

bool ExchangeSession::Handle(v1::SiteMessage message, std::function<void()> resume) {
  if (closed_) return false;
  if (message.kind_case() == v1::SiteMessage::kHello) {
    OnHello(message.hello());
    return true;
  }
  if (stage_ < 0) {
    Reject("before_hello", absl::FailedPreconditionError(
                               "the first message of an Exchange stream must be a Hello"));
    return true;
  }
  core_.federation().Touch(stage_, Federation::Clock::now());
  if (push_only_ && message.kind_case() != v1::SiteMessage::kPush &&
      message.kind_case() != v1::SiteMessage::kOffer) {
    Reject("malformed", absl::InvalidArgumentError(
                            "a push stream carries pushes only; send pulls, acks, heartbeats and "
                            "reports on the primary stream"));
    return true;
  }
  switch (message.kind_case()) {
    case v1::SiteMessage::kPush:
      return OnPush(std::move(*message.mutable_push()), std::move(resume));
    case v1::SiteMessage::kOffer:
      OnOffer(message.offer());
      break;
    case v1::SiteMessage::kPull:
      OnPull(message.pull());
      break;
    case v1::SiteMessage::kAck:
      OnAck(message.ack());
      break;
    case v1::SiteMessage::kHeartbeat:
      break;  // Touch above is all it is for.
    case v1::SiteMessage::kReport:
      core_.federation().Report(stage_, message.report(), Federation::Clock::now());
      break;
    default:
      Reject("malformed", absl::InvalidArgumentError("empty or unknown SiteMessage"));
  }
  return true;
}

void ExchangeSession::OnHello(const v1::Hello& hello) {
  if (stage_ >= 0) {
    Reject("malformed", absl::FailedPreconditionError("Hello sent twice on one stream"));
    return;
  }
  absl::StatusOr<int> stage = core_.federation().Attach(
      site_id_, hello.epoch(), hello.push_only() ? nullptr : channel_, Federation::Clock::now());
  if (!stage.ok()) {
    Reject("stale_epoch", stage.status());
    return;
  }
  stage_ = *stage;
  push_only_ = hello.push_only();
  if (push_only_ && hello.credit()) {
    std::lock_guard<std::mutex> lock(liveness_->mu);
    wants_credit_ = true;
    TopUpCreditLocked();
    if (credit_ == 0) {
      // Always answered, so that the site can wait for its initial credit instead of offering its
      // first frame (a round trip) while the credit is on its way.
      v1::GatewayMessage message;
      message.mutable_push_credit()->set_bytes(0);
      channel_->Send(std::move(message));
    }
  }
}

void ExchangeSession::TopUpCreditLocked() {
  const uint64_t target = core_.push_credit_bytes();
  if (!wants_credit_ || credit_ >= target) return;
  // Not after every frame: each top-up is a message (and a wake-up at the site), and a credit that
  // still funds a largest frame and has lost less than a quarter loses the site no round trip.
  if (credit_ >= core_.options().max_frame_bytes && target - credit_ < target / 4) return;
  const uint64_t want = target - credit_;
  // Never less than one largest frame at a time from nothing: smaller credit could fund no frame
  // and would only sit idle in the budget.
  const uint64_t granted =
      core_.mailbox().GrantCredit(want, std::min(want, core_.options().max_frame_bytes));
  if (granted == 0) return;
  credit_ += granted;
  v1::GatewayMessage message;
  message.mutable_push_credit()->set_bytes(granted);
  channel_->Send(std::move(message));
}

void ExchangeSession::OnOffer(const v1::PushOffer& offer) {
  const uint64_t transfer_id = offer.transfer_id();
  const v1::TensorKey& key = offer.header().key();
  size_t open_transfers = 0;
  {
    std::lock_guard<std::mutex> lock(liveness_->mu);
    if (offers_.count(transfer_id) > 0 || assembler_.IsOpen(transfer_id)) {
      // Answering with a PushAck would end the transfer that is already open under this id.
      Reject("malformed",
             absl::InvalidArgumentError(absl::StrCat("transfer ", transfer_id, " offered twice")));
      return;
    }
    open_transfers = offers_.size() + assembler_.open_transfers();
  }
  absl::Status valid =
      ValidateFrameHeader(offer.header(), core_.spec(), core_.options().max_frame_bytes);
  if (valid.ok() && open_transfers >= core_.options().max_open_transfers_per_stream) {
    valid = absl::ResourceExhaustedError(
        absl::StrCat("more than ", core_.options().max_open_transfers_per_stream,
                     " offered or incomplete transfers on one stream"));
  }
  if (!valid.ok()) {
    core_.federation().CountRejected("malformed",
                                     absl::StrCat("offer from ", site_id_, ": ", valid.message()));
    SendPushAck(transfer_id, key, valid);
    return;
  }
  if (absl::Status allowed = CheckPush(core_.spec(), stage_, key); !allowed.ok()) {
    core_.federation().CountRejected(
        allowed.code() == absl::StatusCode::kPermissionDenied ? "unauthorized" : "malformed",
        absl::StrCat("offer from ", site_id_, ": ", allowed.message()));
    SendPushAck(transfer_id, key, allowed);
    return;
  }
  if (core_.mailbox().Holds(MailboxKey::From(key))) {
    // A retry of a frame the gateway has (or had): idempotent, and no body needs to travel.
    SendPushAck(transfer_id, key, absl::OkStatus());
    return;
  }
  const uint64_t bytes = offer.header().wire_bytes();
  // Runs on the thread that freed the memory, possibly after the stream closed (then `this` may be
  // gone: only shared state is touched) or after the site broke the protocol (the offer is gone).
  auto granted = [this, &mailbox = core_.mailbox(), liveness = liveness_, transfer_id, bytes] {
    {
      std::lock_guard<std::mutex> lock(liveness->mu);
      if (liveness->open) {
        auto it = offers_.find(transfer_id);
        if (it != offers_.end() && !it->second.granted) {
          it->second.granted = true;
          SendPushGrant(transfer_id);
          TopUpCreditLocked();
          return;
        }
      }
    }
    mailbox.Release(bytes);  // Outside liveness->mu: Release runs other streams' grants.
  };
  // Held across Reserve so that `granted` cannot run before the offer is recorded.
  std::lock_guard<std::mutex> lock(liveness_->mu);
  absl::StatusOr<bool> reserved = core_.mailbox().Reserve(bytes, granted);
  if (!reserved.ok()) {
    core_.federation().CountRejected("over_budget", std::string(reserved.status().message()));
    SendPushAck(transfer_id, key, reserved.status());
    return;
  }
  offers_[transfer_id] = Offer{bytes, *reserved};
  if (*reserved) SendPushGrant(transfer_id);
}

void ExchangeSession::SendPushGrant(uint64_t transfer_id) {
  v1::GatewayMessage message;
  message.mutable_push_grant()->set_transfer_id(transfer_id);
  channel_->Send(std::move(message));
}

bool ExchangeSession::OnPush(v1::PushChunk chunk, std::function<void()> resume) {
  const uint64_t transfer_id = chunk.transfer_id();
  if (refused_transfers_.count(transfer_id) > 0) return true;
  // Chunk 0 of an offered frame takes over the offer's reservation.
  uint64_t granted_bytes = 0;
  bool offered = false;
  if (chunk.chunk().index() == 0) {
    core_.MaybeTamper(chunk);
    std::lock_guard<std::mutex> lock(liveness_->mu);
    if (auto it = offers_.find(transfer_id); it != offers_.end()) {
      offered = true;
      if (it->second.granted) granted_bytes = it->second.bytes;
      offers_.erase(it);  // An ungranted offer's reservation is returned when it comes (OnOffer).
    }
  }
  if (offered && granted_bytes == 0) {
    RefusePush(
        transfer_id, chunk.header().key(), "malformed",
        absl::FailedPreconditionError(absl::StrCat(
            "transfer ", transfer_id, ": body pushed before the gateway granted its offer")));
    return true;
  }
  // Kept before Add consumes the chunk: a refusal names the frame when it can.
  v1::TensorKey refused_key = chunk.header().key();
  std::shared_ptr<StoredFrame> dropped;
  absl::StatusOr<FrameAssembler::Event> event = assembler_.Add(std::move(chunk), &dropped);
  if (!event.ok()) {
    if (dropped != nullptr) {
      refused_key = dropped->header.key();
      // A transfer that had started is stored (Publish): the mailbox frees its bytes.
      core_.mailbox().Abandon(dropped);
    }
    core_.mailbox().Release(granted_bytes);
    // The whole transfer is refused, once: its producer learns why from the ack, and the rest of
    // its chunks are dropped quietly (a 16 MiB frame over the limit would otherwise earn 511
    // errors).
    RefusePush(transfer_id, refused_key, "malformed", event.status());
    return true;
  }
  std::shared_ptr<StoredFrame> frame = event->frame;
  if (!event->started) {
    if (event->completed) Completed(*frame, transfer_id);
    return true;
  }
  const v1::TensorKey& key = frame->header.key();
  absl::Status allowed = CheckPush(core_.spec(), stage_, key);
  if (allowed.ok() && offered && frame->wire_bytes() != granted_bytes) {
    allowed = absl::InvalidArgumentError(
        absl::StrCat("transfer ", transfer_id, " has ", frame->wire_bytes(),
                     " wire bytes; its offer had ", granted_bytes));
  }
  if (!allowed.ok()) {
    core_.mailbox().Release(granted_bytes);
    RefusePush(transfer_id, key,
               allowed.code() == absl::StatusCode::kPermissionDenied ? "unauthorized" : "malformed",
               allowed);
    return true;
  }
  const uint64_t bytes = frame->wire_bytes();
  // Admission, credit protocol: the offer's grant or the stream's standing credit reserved the
  // frame's bytes before the site sent its body.
  bool funded = offered;
  if (!funded) {
    std::lock_guard<std::mutex> lock(liveness_->mu);
    if (credit_ >= bytes) {
      credit_ -= bytes;
      core_.mailbox().UseCredit(bytes);
      TopUpCreditLocked();
      funded = true;
    }
  }
  if (funded) {
    Publish(frame, transfer_id);
    return true;
  }
  // Admission, a producer without credit: reserve the frame's bytes before reading its body. When
  // the budget is full the stream stops being read until an ack frees space (flow control, not an
  // error); gRPC then holds what the site sent meanwhile.
  auto granted = [this, &mailbox = core_.mailbox(), liveness = liveness_, frame, transfer_id, bytes,
                  resume] {
    std::lock_guard<std::mutex> lock(liveness->mu);
    if (!liveness->open) {
      mailbox.Release(bytes);  // The mailbox outlives every session; `this` may be gone.
      return;
    }
    unreserved_transfer_.reset();
    Publish(frame, transfer_id);
    resume();
  };
  // Held across Reserve so that `granted` (which takes it) cannot run before this stream's state
  // says it is waiting.
  std::lock_guard<std::mutex> lock(liveness_->mu);
  absl::StatusOr<bool> reserved = core_.mailbox().Reserve(bytes, granted);
  if (!reserved.ok()) {
    DropTransfer(transfer_id);
    core_.federation().CountRejected("over_budget", std::string(reserved.status().message()));
    SendPushAck(transfer_id, key, reserved.status());
    return true;
  }
  if (!*reserved) {
    // `granted` publishes and resumes; until then the transfer holds no reservation.
    unreserved_transfer_ = transfer_id;
    return false;
  }
  Publish(frame, transfer_id);
  return true;
}

void ExchangeSession::Publish(const std::shared_ptr<StoredFrame>& frame, uint64_t transfer_id) {
  if (core_.mailbox().Store(frame) == Mailbox::StoreResult::kStored) {
    if (frame->complete()) Completed(*frame, transfer_id);
    return;
  }
  // Held already, or of a purged generation: the gateway needs none of it. The producer may drop
  // its copy now; the rest of the body, if any is still coming, is dropped quietly.
  if (!frame->complete()) DropTransfer(transfer_id);
  SendPushAck(transfer_id, frame->header.key(), absl::OkStatus());
}

void ExchangeSession::RefusePush(uint64_t transfer_id, const v1::TensorKey& key,
                                 const std::string& reason, const absl::Status& status) {
  DropTransfer(transfer_id);
  core_.federation().CountRejected(reason,
                                   absl::StrCat("push from ", site_id_, ": ", status.message()));
  SendPushAck(transfer_id, key, status);
}

void ExchangeSession::DropTransfer(uint64_t transfer_id) {
  assembler_.Drop(transfer_id);
  if (refused_transfers_.size() >= kMaxRefusedTransfers) refused_transfers_.clear();
  refused_transfers_.insert(transfer_id);
}

void ExchangeSession::Completed(const StoredFrame& frame, uint64_t transfer_id) {
  // A frame the mailbox broke off meanwhile (a rollback purged it, or a newer push of its key
  // replaced it) is not counted; its producer may still drop its copy.
  if (frame.complete()) core_.federation().CountPushed(frame.header);
  SendPushAck(transfer_id, frame.header.key(), absl::OkStatus());
}

void ExchangeSession::OnPull(const v1::Pull& pull) {
  absl::Status allowed = CheckPull(core_.spec(), stage_, pull.key());
  if (!allowed.ok()) {
    core_.federation().CountRejected(
        allowed.code() == absl::StatusCode::kPermissionDenied ? "unauthorized" : "malformed",
        absl::StrCat("pull from ", site_id_, ": ", allowed.message()));
    channel_->Send(DeliverError(pull.pull_id(), allowed));
    return;
  }
  if (pulls_->waiting() >= core_.options().max_pulls_per_stream) {
    Reject("malformed", absl::ResourceExhaustedError(absl::StrCat(
                            "more than ", core_.options().max_pulls_per_stream, " pulls waiting")));
    channel_->Send(DeliverError(pull.pull_id(), absl::ResourceExhaustedError("too many pulls")));
    return;
  }
  const auto timeout = pull.timeout_ms() > 0 ? std::chrono::milliseconds(pull.timeout_ms())
                                             : core_.options().default_pull_timeout;
  StartPull(core_, channel_, pulls_, MailboxKey::From(pull.key()), pull.pull_id(),
            Mailbox::Clock::now() + timeout);
}

void ExchangeSession::StartPull(GatewayCore& core, std::shared_ptr<SiteChannel> channel,
                                std::shared_ptr<PullTracker> pulls, MailboxKey key,
                                uint64_t pull_id, Mailbox::Clock::time_point deadline) {
  // The callback may outlive the session (it runs when the frame arrives): it holds only shared
  // state, never the session.
  const uint64_t ticket = pulls->NewTicket();
  auto done = [&core, channel, pulls, key, pull_id, deadline,
               ticket](absl::StatusOr<FramePtr> frame) {
    pulls->Finished(ticket);
    if (!frame.ok()) {
      channel->Send(DeliverError(pull_id, frame.status()));
      return;
    }
    core.federation().CountDelivered((*frame)->header,
                                     Federation::Clock::now() - (*frame)->created_at);
    // Should the frame break off mid-delivery, the site is told to restart and the same pull waits
    // for the producer's next push of the key.
    // Weak: the channel holds this callback while the frame is delivered.
    std::weak_ptr<SiteChannel> weak_channel = channel;
    channel->SendFrame(pull_id, *frame, [&core, weak_channel, pulls, key, pull_id, deadline] {
      std::shared_ptr<SiteChannel> channel = weak_channel.lock();
      if (channel != nullptr && !pulls->closed()) {
        StartPull(core, channel, pulls, key, pull_id, deadline);
      }
    });
  };
  const uint64_t mailbox_id = core.mailbox().Pull(key, deadline, std::move(done));
  pulls->Started(ticket, mailbox_id);
}

void ExchangeSession::OnAck(const v1::Ack& ack) {
  absl::Status allowed = CheckPull(core_.spec(), stage_, ack.key());
  if (!allowed.ok()) {
    core_.federation().CountRejected("unauthorized",
                                     absl::StrCat("ack from ", site_id_, ": ", allowed.message()));
    SendError(allowed);
    return;
  }
  absl::Status acked = core_.mailbox().Ack(MailboxKey::From(ack.key()));
  if (!acked.ok()) SendError(acked);
}

void ExchangeSession::Close() {
  if (closed_) return;
  closed_ = true;
  uint64_t granted_bytes = 0;
  uint64_t credit = 0;
  {
    // A reservation granted from now on returns its bytes instead of storing (see OnPush, OnOffer).
    std::lock_guard<std::mutex> lock(liveness_->mu);
    liveness_->open = false;
    if (unreserved_transfer_) assembler_.Drop(*unreserved_transfer_);
    for (const auto& [id, offer] : offers_) {
      if (offer.granted) granted_bytes += offer.bytes;
    }
    offers_.clear();
    credit = std::exchange(credit_, 0);
  }
  // Outside liveness_->mu: returning memory runs other streams' grants. Every open transfer but an
  // unreserved one (dropped above) is stored: the mailbox frees its bytes.
  core_.mailbox().ReleaseCredit(credit);
  core_.mailbox().Release(granted_bytes);
  for (const std::shared_ptr<StoredFrame>& frame : assembler_.DropAll()) {
    core_.mailbox().Abandon(frame);
  }
  for (const auto& [ticket, id] : pulls_->Close()) core_.mailbox().CancelPull(id);
  if (stage_ >= 0 && !push_only_) {
    core_.federation().Detach(stage_, channel_.get(), Federation::Clock::now());
  }
}

void ExchangeSession::SendError(absl::Status status) {
  v1::GatewayMessage message;
  message.mutable_error()->set_status_code(static_cast<int>(status.code()));
  message.mutable_error()->set_message(std::string(status.message()));
  channel_->Send(std::move(message));
}

void ExchangeSession::SendPushAck(uint64_t transfer_id, const v1::TensorKey& key,
                                  const absl::Status& status) {
  v1::GatewayMessage message;
  v1::PushAck& ack = *message.mutable_push_ack();
  ack.set_transfer_id(transfer_id);
  *ack.mutable_key() = key;
  ack.set_status_code(static_cast<int>(status.code()));
  ack.set_status_message(std::string(status.message()));
  channel_->Send(std::move(message));
}

void ExchangeSession::Reject(const std::string& reason, const absl::Status& status) {
  core_.federation().CountRejected(reason, absl::StrCat("from ", site_id_, ": ", status.message()));
  SendError(status);
}

}  // namespace strait::gateway
