#include "gateway/rpc/exchange_reactor.h"

#include <deque>
#include <mutex>
#include <optional>
#include <variant>

#include "gateway/rpc/status_conversion.h"

namespace strait::gateway {

// The stream's write side, shared with whoever may send to the site (the federation, pull
// completions on other threads). gRPC allows one write in flight: messages queue here, frames queue
// as cursors and become one Deliver message per chunk only when written, so a queued frame costs no
// copy. After the reactor is done, everything sent is dropped.
class ExchangeReactor::Outbox : public SiteChannel {
 public:
  explicit Outbox(ExchangeReactor* reactor) : reactor_(reactor) {}

  void Send(v1::GatewayMessage message) override { Enqueue(std::move(message)); }
  void SendFrame(uint64_t pull_id, FramePtr frame) override {
    Enqueue(FrameCursor{pull_id, std::move(frame), 0});
  }
  void Close(absl::Status status) override {
    ExchangeReactor* finish = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closing_ || reactor_ == nullptr) return;
      closing_ = true;
      finish_status_ = status;
      if (!writing_ && queue_.empty()) finish = reactor_;
    }
    if (finish != nullptr) finish->Finish(ToGrpcStatus(*finish_status_));
  }

  // The previous write completed; starts the next one, or finishes when closing and drained.
  void WriteDone(bool ok) {
    std::unique_lock<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) queue_.clear();  // The stream broke: nothing more will be written.
    if (reactor_ == nullptr) return;
    StartNextLocked(lock);    // With an empty queue this finishes a closing stream.
  }

  // The reactor is going away: drop everything from now on.
  void Detach() {
    std::lock_guard<std::mutex> lock(mu_);
    reactor_ = nullptr;
    queue_.clear();
  }

 private:
  struct FrameCursor {
    uint64_t pull_id;
    FramePtr frame;
    size_t next_chunk;
  };

  void Enqueue(std::variant<v1::GatewayMessage, FrameCursor> item) {
    std::unique_lock<std::mutex> lock(mu_);
    if (reactor_ == nullptr || closing_) return;
    queue_.push_back(std::move(item));
    if (!writing_) StartNextLocked(lock);
  }

  // Takes the next message off the queue and writes it; releases `lock` before calling into gRPC.
  void StartNextLocked(std::unique_lock<std::mutex>& lock) {
    if (queue_.empty()) {
      if (closing_ && reactor_ != nullptr) {
        ExchangeReactor* reactor = reactor_;
        const absl::Status status = *finish_status_;
        lock.unlock();
        reactor->Finish(ToGrpcStatus(status));
      }
      return;
    }
    auto& front = queue_.front();
    if (auto* message = std::get_if<v1::GatewayMessage>(&front)) {
      current_ = std::move(*message);
      queue_.pop_front();
    } else {
      FrameCursor& cursor = std::get<FrameCursor>(front);
      current_.Clear();
      v1::Deliver& deliver = *current_.mutable_deliver();
      deliver.set_pull_id(cursor.pull_id);
      if (cursor.next_chunk == 0) *deliver.mutable_header() = cursor.frame->header;
      deliver.mutable_chunk()->set_index(static_cast<uint32_t>(cursor.next_chunk));
      deliver.mutable_chunk()->set_data(cursor.frame->chunks[cursor.next_chunk]);
      if (++cursor.next_chunk == cursor.frame->chunks.size()) queue_.pop_front();
    }
    writing_ = true;
    ExchangeReactor* reactor = reactor_;
    lock.unlock();
    reactor->StartWrite(&current_);
  }

  std::mutex mu_;
  ExchangeReactor* reactor_;
  std::deque<std::variant<v1::GatewayMessage, FrameCursor>> queue_;
  v1::GatewayMessage current_;  // Owned by gRPC while writing_.
  bool writing_ = false;
  bool closing_ = false;
  std::optional<absl::Status> finish_status_;
};

ExchangeReactor::ExchangeReactor(GatewayCore& core, std::string site_id)
    : outbox_(std::make_shared<Outbox>(this)),
      session_(std::make_unique<ExchangeSession>(core, std::move(site_id), outbox_)) {
  ReadNext();
}

ExchangeReactor::~ExchangeReactor() = default;

void ExchangeReactor::ReadNext() {
  incoming_.Clear();
  StartRead(&incoming_);
}

void ExchangeReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The site closed its side (or the stream broke): end ours once queued replies are out.
    session_->Close();
    outbox_->Close(absl::OkStatus());
    return;
  }
  // When the mailbox is full the session returns false and calls the resume callback later; until
  // then no read is outstanding, which is what stops the producer (gRPC flow control).
  if (session_->Handle(std::move(incoming_), [this] { ReadNext(); })) ReadNext();
}

void ExchangeReactor::OnWriteDone(bool ok) { outbox_->WriteDone(ok); }

void ExchangeReactor::OnDone() {
  session_->Close();
  outbox_->Detach();
  delete this;
}

}  // namespace strait::gateway
