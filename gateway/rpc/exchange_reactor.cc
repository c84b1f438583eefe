#include "gateway/rpc/exchange_reactor.h"

#include <deque>
#include <mutex>
#include <optional>
#include <variant>
#include <vector>

#include "gateway/rpc/status_conversion.h"

namespace strait::gateway {

// The stream's write side, shared with whoever may send to the site (the federation, pull
// completions on other threads). gRPC allows one write in flight: messages queue here, frames queue
// as cursors and become one Deliver message per chunk only when written, so a queued frame costs no
// copy. A cursor whose next chunk has not arrived yet leaves the queue (other deliveries go on) and
// comes back when the chunk does. After the reactor is done, everything sent is dropped.
class ExchangeReactor::Outbox : public SiteChannel, public std::enable_shared_from_this<Outbox> {
 public:
  explicit Outbox(ExchangeReactor* reactor) : reactor_(reactor) {}

  void Send(v1::GatewayMessage message) override { Enqueue(std::move(message)); }
  void SendFrame(uint64_t pull_id, FramePtr frame, std::function<void()> pull_again) override {
    Enqueue(FrameCursor{pull_id, std::move(frame), 0, std::move(pull_again)});
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
    StartNextLocked(lock);  // With an empty queue this finishes a closing stream.
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
    uint32_t next_chunk;
    std::function<void()> pull_again;
  };
  using Item = std::variant<v1::GatewayMessage, FrameCursor>;

  void Enqueue(Item item) {
    std::unique_lock<std::mutex> lock(mu_);
    if (reactor_ == nullptr || closing_) return;
    queue_.push_back(std::move(item));
    if (!writing_) StartNextLocked(lock);
  }

  // Takes the next message off the queue and writes it; releases `lock` before calling into gRPC
  // and before pulling again for frames that broke off.
  void StartNextLocked(std::unique_lock<std::mutex>& lock) {
    std::vector<std::function<void()>> pulls_again;
    bool write = false;
    while (!queue_.empty() && !write) {
      if (auto* message = std::get_if<v1::GatewayMessage>(&queue_.front())) {
        current_ = std::move(*message);
        queue_.pop_front();
        write = true;
      } else {
        write = NextFrameMessageLocked(pulls_again);
      }
    }
    ExchangeReactor* reactor = reactor_;
    const bool finish = !write && closing_ && reactor != nullptr;
    writing_ = write;
    lock.unlock();
    if (write) reactor->StartWrite(&current_);
    if (finish) reactor->Finish(ToGrpcStatus(*finish_status_));
    // After the restart message is queued: the frame pushed again is delivered after it.
    for (auto& pull_again : pulls_again) pull_again();
  }

  // The queue's front is a frame cursor. Puts its next message in current_ and returns true, or
  // takes the cursor off the queue and returns false: parked until its next chunk arrives, or ended
  // because the frame broke off (its pull is appended to `pulls_again`; with chunks already
  // written, the site is first told to restart).
  bool NextFrameMessageLocked(std::vector<std::function<void()>>& pulls_again) {
    FrameCursor& cursor = std::get<FrameCursor>(queue_.front());
    const StoredFrame& frame = *cursor.frame;
    if (frame.broken()) {
      const bool written = cursor.next_chunk > 0;
      current_.Clear();
      current_.mutable_deliver()->set_pull_id(cursor.pull_id);
      current_.mutable_deliver()->set_restart(true);
      pulls_again.push_back(std::move(cursor.pull_again));
      queue_.pop_front();
      return written;
    }
    if (cursor.next_chunk >= frame.available()) {
      auto resume = [weak = weak_from_this(), parked = cursor] {
        if (auto outbox = weak.lock()) outbox->Enqueue(parked);
      };
      if (frame.WhenAvailable(cursor.next_chunk, std::move(resume))) return false;  // There now.
      queue_.pop_front();  // `resume` holds it.
      return false;
    }
    current_.Clear();
    v1::Deliver& deliver = *current_.mutable_deliver();
    deliver.set_pull_id(cursor.pull_id);
    if (cursor.next_chunk == 0) *deliver.mutable_header() = frame.header;
    deliver.mutable_chunk()->set_index(cursor.next_chunk);
    deliver.mutable_chunk()->set_data(frame.chunk(cursor.next_chunk));
    if (++cursor.next_chunk == frame.chunk_count()) queue_.pop_front();
    return true;
  }

  std::mutex mu_;
  ExchangeReactor* reactor_;
  std::deque<Item> queue_;
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
  // The session never waits for memory (a push without a reservation is refused), so the next read
  // starts at once.
  session_->Handle(std::move(incoming_));
  ReadNext();
}

void ExchangeReactor::OnWriteDone(bool ok) { outbox_->WriteDone(ok); }

void ExchangeReactor::OnDone() {
  session_->Close();
  outbox_->Detach();
  delete this;
}

}  // namespace strait::gateway
