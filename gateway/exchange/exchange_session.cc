#include "gateway/exchange/exchange_session.h"

#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "core/frame_header.h"
#include "core/status.h"
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

// The session's mailbox pulls still waiting, so Close can cancel them. Shared with the pull
// callbacks, which run on other threads. A pull is recorded under its mailbox id before it starts
// (Mailbox::Pull may complete it before returning).
class ExchangeSession::PullTracker {
 public:
  // Records pull `id` as waiting. False once the session closed: the pull must not start.
  bool Add(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return false;
    waiting_.insert(id);
    return true;
  }
  void Finished(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    waiting_.erase(id);
  }
  size_t waiting() {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_.size();
  }
  // The session closed: returns the pulls still waiting; no pull starts from now on.
  std::set<uint64_t> Close() {
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
  std::set<uint64_t> waiting_;  // Mailbox pull ids.
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

void ExchangeSession::Handle(v1::SiteMessage message) {
  if (closed_) return;
  if (message.kind_case() == v1::SiteMessage::kHello) {
    OnHello(message.hello());
    return;
  }
  if (slot_ < 0) {
    Reject("before_hello", absl::FailedPreconditionError(
                               "the first message of an Exchange stream must be a Hello"));
    return;
  }
  core_.federation().Touch(slot_, Federation::Clock::now());
  if (push_only_ && message.kind_case() != v1::SiteMessage::kPush &&
      message.kind_case() != v1::SiteMessage::kOffer) {
    Reject("malformed", absl::InvalidArgumentError(
                            "a push stream carries pushes only; send pulls, acks, heartbeats and "
                            "reports on the primary stream"));
    return;
  }
  switch (message.kind_case()) {
    case v1::SiteMessage::kPush:
      OnPush(std::move(*message.mutable_push()));
      break;
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
      core_.federation().Report(slot_, message.report(), Federation::Clock::now());
      break;
    default:
      Reject("malformed", absl::InvalidArgumentError("empty or unknown SiteMessage"));
  }
}

void ExchangeSession::OnHello(const v1::Hello& hello) {
  if (slot_ >= 0) {
    Reject("malformed", absl::FailedPreconditionError("Hello sent twice on one stream"));
    return;
  }
  absl::StatusOr<int> stage = core_.federation().Attach(
      site_id_, hello.epoch(), hello.push_only() ? nullptr : channel_, Federation::Clock::now());
  if (!stage.ok()) {
    Reject("stale_epoch", stage.status());
    return;
  }
  slot_ = *stage;
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
  if (absl::Status allowed = CheckPush(core_.spec(), slot_, key); !allowed.ok()) {
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
    // Outside liveness->mu: Release runs other streams' grants. A failure is a bug the mailbox
    // has counted and logged already.
    mailbox.Release(bytes).IgnoreError();
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

void ExchangeSession::OnPush(v1::PushChunk chunk) {
  const uint64_t transfer_id = chunk.transfer_id();
  if (refused_transfers_.count(transfer_id) > 0) return;
  // Chunk 0 of an offered frame takes over the offer's reservation.
  std::optional<Offer> offer;
  if (chunk.chunk().index() == 0) offer = TakeOffer(transfer_id);
  const uint64_t granted_bytes = offer && offer->granted ? offer->bytes : 0;
  if (offer && !offer->granted) {
    RefusePush(
        transfer_id, chunk.header().key(), "unfunded",
        absl::FailedPreconditionError(absl::StrCat(
            "transfer ", transfer_id, ": body pushed before the gateway granted its offer")));
    return;
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
    // A failure is a bug the mailbox has counted and logged already.
    core_.mailbox().Release(granted_bytes).IgnoreError();
    // The whole transfer is refused, once: its producer learns why from the ack, and the rest of
    // its chunks are dropped quietly (a 16 MiB frame over the limit would otherwise earn 511
    // errors).
    RefusePush(transfer_id, refused_key, "malformed", event.status());
    return;
  }
  std::shared_ptr<StoredFrame> frame = event->frame;
  if (!event->started) {
    if (event->completed) Completed(frame, transfer_id);
    return;
  }
  const v1::TensorKey& key = frame->header.key();
  absl::Status allowed = CheckPush(core_.spec(), slot_, key);
  if (allowed.ok() && offer && frame->wire_bytes() != granted_bytes) {
    allowed = absl::InvalidArgumentError(
        absl::StrCat("transfer ", transfer_id, " has ", frame->wire_bytes(),
                     " wire bytes; its offer had ", granted_bytes));
  }
  if (!allowed.ok()) {
    core_.mailbox().Release(granted_bytes).IgnoreError();  // As above.
    RefusePush(transfer_id, key,
               allowed.code() == absl::StatusCode::kPermissionDenied ? "unauthorized" : "malformed",
               allowed);
    return;
  }
  // Admission: the offer's grant reserved the frame's bytes, or the stream's standing credit must.
  if (!offer) {
    if (absl::Status funded = FundFromCredit(transfer_id, frame->wire_bytes()); !funded.ok()) {
      RefusePush(transfer_id, key,
                 funded.code() == absl::StatusCode::kFailedPrecondition ? "unfunded" : "internal",
                 funded);
      return;
    }
  }
  Publish(frame, transfer_id);
}

std::optional<ExchangeSession::Offer> ExchangeSession::TakeOffer(uint64_t transfer_id) {
  std::lock_guard<std::mutex> lock(liveness_->mu);
  auto it = offers_.find(transfer_id);
  if (it == offers_.end()) return std::nullopt;
  const Offer offer = it->second;
  offers_.erase(it);
  return offer;
}

absl::Status ExchangeSession::FundFromCredit(uint64_t transfer_id, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(liveness_->mu);
  if (credit_ < bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("transfer ", transfer_id, ": ", bytes,
                     " wire bytes pushed with neither a grant nor enough "
                     "standing credit (",
                     credit_, " bytes); offer the frame first (gateway.proto, Hello)"));
  }
  // The mailbox's credit is the sum of every stream's: it cannot be below this stream's.
  STRAIT_RETURN_IF_ERROR(core_.mailbox().UseCredit(bytes));
  credit_ -= bytes;
  TopUpCreditLocked();
  return absl::OkStatus();
}

void ExchangeSession::Publish(const std::shared_ptr<StoredFrame>& frame, uint64_t transfer_id) {
  const Mailbox::StoreResult stored = core_.mailbox().Store(frame);
  if (stored == Mailbox::StoreResult::kStored) {
    if (frame->complete()) Completed(frame, transfer_id);
    return;
  }
  if (stored == Mailbox::StoreResult::kDuplicate && frame->header.key().purpose() == v1::SUM) {
    // A masked vector is taken once: a second push of its key is a replay (or a retry whose first
    // push got through), never added again.
    core_.federation().CountRejected(
        "sum_refused", absl::StrCat("masked vector from ", site_id_,
                                    " pushed again: ", TensorKeyToString(frame->header.key())));
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

void ExchangeSession::Completed(const std::shared_ptr<StoredFrame>& frame, uint64_t transfer_id) {
  // A frame the mailbox broke off meanwhile (a rollback purged it, or a newer push of its key
  // replaced it) is not counted; its producer may still drop its copy.
  if (frame->complete()) {
    core_.federation().CountPushed(frame->header);
    // A masked vector is the gateway's to add up (CheckPush let only its replica push it).
    if (frame->header.key().purpose() == v1::SUM) core_.sums().Take(slot_, frame);
  }
  SendPushAck(transfer_id, frame->header.key(), absl::OkStatus());
}

void ExchangeSession::OnPull(const v1::Pull& pull) {
  absl::Status allowed = CheckPull(core_.spec(), slot_, pull.key());
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
  const uint64_t id = core.mailbox().NewPullId();
  if (!pulls->Add(id)) return;  // The session closed: nobody would read the frame.
  // The callback may outlive the session (it runs when the frame arrives): it holds only shared
  // state, never the session.
  auto done = [&core, channel, pulls, key, pull_id, deadline, id](absl::StatusOr<FramePtr> frame) {
    pulls->Finished(id);
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
      if (channel != nullptr) StartPull(core, channel, pulls, key, pull_id, deadline);
    });
  };
  if (absl::Status started = core.mailbox().Pull(id, key, deadline, std::move(done));
      !started.ok()) {
    pulls->Finished(id);
    channel->Send(DeliverError(pull_id, started));
    return;
  }
  // Close may have run on the session's thread since Add, before the mailbox held the pull.
  if (pulls->closed()) core.mailbox().CancelPull(id);
}

void ExchangeSession::OnAck(const v1::Ack& ack) {
  absl::Status allowed = CheckPull(core_.spec(), slot_, ack.key());
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
    for (const auto& [id, offer] : offers_) {
      if (offer.granted) granted_bytes += offer.bytes;
    }
    offers_.clear();
    credit = std::exchange(credit_, 0);
  }
  // Outside liveness_->mu: returning memory runs other streams' grants. A failure is a bug the
  // mailbox has counted and logged already. Every open transfer is stored: the mailbox frees its
  // bytes.
  core_.mailbox().ReleaseCredit(credit).IgnoreError();
  core_.mailbox().Release(granted_bytes).IgnoreError();
  for (const std::shared_ptr<StoredFrame>& frame : assembler_.DropAll()) {
    core_.mailbox().Abandon(frame);
  }
  for (uint64_t id : pulls_->Close()) core_.mailbox().CancelPull(id);
  if (slot_ >= 0 && !push_only_) {
    core_.federation().Detach(slot_, channel_.get(), Federation::Clock::now());
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
