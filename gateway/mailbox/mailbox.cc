#include "gateway/mailbox/mailbox.h"

#include <spdlog/spdlog.h>

#include <cassert>
#include <limits>

#include "absl/strings/str_cat.h"

namespace strait::gateway {
namespace {

// A producer retries only pushes that were in flight when its stream broke, all within the last
// few steps; acknowledgements older than this many steps behind the newest are forgotten.
constexpr uint64_t kAckedStepWindow = 16;

// The smallest key of `step` in `generation`.
MailboxKey FirstKeyOf(uint32_t generation, uint64_t step) {
  return {.step = step,
          .direction = std::numeric_limits<int>::min(),
          .generation = generation,
          .purpose = std::numeric_limits<int>::min()};
}

void RunAll(std::vector<std::function<void()>>& completions) {
  for (auto& completion : completions) completion();
}

}  // namespace

Mailbox::Mailbox(uint64_t budget_bytes, uint64_t credit_limit_bytes)
    : budget_(budget_bytes), credit_limit_(std::min(credit_limit_bytes, budget_bytes)) {}

Mailbox::~Mailbox() = default;

absl::StatusOr<bool> Mailbox::Reserve(uint64_t bytes, std::function<void()> granted) {
  if (bytes > budget_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("frame of ", bytes, " bytes exceeds the gateway's whole memory budget of ",
                     budget_, " bytes; raise gateway.memory_budget"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (reservations_.empty() && reserved_ + bytes <= budget_) {
    reserved_ += bytes;
    return true;
  }
  reservations_.push_back({bytes, std::move(granted)});
  return false;
}

absl::Status Mailbox::Release(uint64_t bytes) {
  std::vector<Completion> completions;
  absl::Status released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    released = UnreserveLocked(bytes, /*credit=*/false, "released");
    GrantReservationsLocked(completions);
  }
  RunAll(completions);
  return released;
}

uint64_t Mailbox::GrantCredit(uint64_t want_bytes, uint64_t min_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!reservations_.empty() || want_bytes == 0) return 0;
  if (reserved_ > budget_ || credit_ > credit_limit_) {
    // Reserve, GrantCredit and GrantReservationsLocked never let this happen.
    AccountingErrorLocked(absl::StrCat("reserved ", reserved_, " of a budget of ", budget_,
                                       ", credit ", credit_, " of a limit of ", credit_limit_))
        .IgnoreError();  // Counted and logged; no credit is the safe answer.
    return 0;
  }
  const uint64_t room = std::min(budget_ - reserved_, credit_limit_ - credit_);
  const uint64_t granted = std::min(want_bytes, room);
  if (granted == 0 || granted < min_bytes) return 0;
  reserved_ += granted;
  credit_ += granted;
  return granted;
}

absl::Status Mailbox::UseCredit(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > credit_) {
    return AccountingErrorLocked(
        absl::StrCat("used ", bytes, " bytes of credit; ", credit_, " outstanding"));
  }
  credit_ -= bytes;
  return absl::OkStatus();
}

absl::Status Mailbox::ReleaseCredit(uint64_t bytes) {
  std::vector<Completion> completions;
  absl::Status released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    released = UnreserveLocked(bytes, /*credit=*/true, "returned as credit");
    GrantReservationsLocked(completions);
  }
  RunAll(completions);
  return released;
}

bool Mailbox::Holds(const MailboxKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (key.generation < min_generation_ || acked_.count(key) > 0) return true;
  auto it = frames_.find(key);
  // A frame still arriving may yet break off: a new push of its key must not be turned away.
  return it != frames_.end() && it->second->complete();
}

Mailbox::StoreResult Mailbox::Store(FramePtr frame) {
  const MailboxKey key = MailboxKey::From(frame->header.key());
  std::vector<Completion> completions;
  StoreResult result = StoreResult::kStored;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto held = frames_.find(key);
    if (key.generation < min_generation_) {
      // Pushed before a rollback that purged its generation: nobody will ever pull it.
      UnreserveLocked(frame->wire_bytes(), /*credit=*/false, "of a stale frame released")
          .IgnoreError();  // Counted and logged; the frame is dropped either way.
      GrantReservationsLocked(completions);
      result = StoreResult::kStale;
    } else if (acked_.count(key) > 0 || (held != frames_.end() && held->second->complete())) {
      ++duplicates_;
      UnreserveLocked(frame->wire_bytes(), /*credit=*/false, "of a duplicate released")
          .IgnoreError();  // Counted and logged; the frame is dropped either way.
      GrantReservationsLocked(completions);
      result = StoreResult::kDuplicate;
    } else {
      if (held != frames_.end()) {
        EraseFrameLocked(held, completions);  // Still arriving: the new push replaces it.
        GrantReservationsLocked(completions);
      }
      frames_.emplace(key, frame);
      stored_bytes_ += frame->wire_bytes();
      newest_step_ = std::max(newest_step_, key.step);
      for (auto it = waiters_.begin(); it != waiters_.end();) {
        if (it->second.key == key) {
          completions.push_back([done = std::move(it->second.done), frame] { done(frame); });
          it = waiters_.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  RunAll(completions);
  return result;
}

void Mailbox::Abandon(const FramePtr& frame) {
  std::vector<Completion> completions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = frames_.find(MailboxKey::From(frame->header.key()));
    if (it != frames_.end() && it->second == frame) {
      EraseFrameLocked(it, completions);
      GrantReservationsLocked(completions);
    }
  }
  frame->BreakOff();
  RunAll(completions);
}

uint64_t Mailbox::NewPullId() { return next_pull_id_.fetch_add(1, std::memory_order_relaxed); }

absl::Status Mailbox::Pull(uint64_t pull_id, const MailboxKey& key, Clock::time_point deadline,
                           PullDone done) {
  FramePtr frame;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (waiters_.count(pull_id) > 0) {
      return AccountingErrorLocked(absl::StrCat("pull id ", pull_id, " is in use"));
    }
    if (key.generation < min_generation_) {
      frame = nullptr;
    } else if (auto it = frames_.find(key); it != frames_.end() && !it->second->broken()) {
      frame =
          it->second;  // Broken off (its producer's session forgets it next): wait for the next.
    } else {
      waiters_.emplace(pull_id, Waiter{key, deadline, std::move(done)});
      return absl::OkStatus();
    }
  }
  if (frame == nullptr) {
    done(absl::AbortedError("the federation rolled back; this key's generation is over"));
  } else {
    done(frame);
  }
  return absl::OkStatus();
}

void Mailbox::CancelPull(uint64_t pull_id) {
  std::lock_guard<std::mutex> lock(mu_);
  waiters_.erase(pull_id);
}

void Mailbox::ExpirePulls(Clock::time_point now) {
  std::vector<Completion> completions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->second.deadline <= now) {
        completions.push_back([done = std::move(it->second.done)] {
          done(absl::DeadlineExceededError("the frame was not pushed before the pull's deadline"));
        });
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
  RunAll(completions);
}

absl::Status Mailbox::Ack(const MailboxKey& key) {
  std::vector<Completion> completions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = frames_.find(key);
    if (it == frames_.end()) {
      // Acknowledging twice (a retry after a reconnect) is harmless.
      if (acked_.count(key) > 0) return absl::OkStatus();
      return absl::NotFoundError("acknowledged a key the gateway does not hold");
    }
    if (!it->second->complete()) {
      return absl::FailedPreconditionError("acknowledged a frame whose chunks are still arriving");
    }
    EraseFrameLocked(it, completions);
    acked_.insert(key);
    TrimAckedLocked();
    GrantReservationsLocked(completions);
  }
  RunAll(completions);
  return absl::OkStatus();
}

void Mailbox::PurgeGenerationsBelow(uint32_t generation) {
  std::vector<Completion> completions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    min_generation_ = std::max(min_generation_, generation);
    newest_step_ = 0;  // The new generation may replay earlier steps.
    for (auto it = frames_.begin(); it != frames_.end() && it->first.generation < generation;) {
      it = EraseFrameLocked(it, completions);
    }
    acked_.erase(acked_.begin(), acked_.lower_bound(MailboxKey{.generation = generation}));
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->second.key.generation < generation) {
        completions.push_back([done = std::move(it->second.done)] {
          done(absl::AbortedError("the federation rolled back; this key's generation is over"));
        });
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    GrantReservationsLocked(completions);
  }
  RunAll(completions);
}

Mailbox::Stats Mailbox::GetStats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats stats{frames_.size(),  stored_bytes_,        reserved_,   credit_,           budget_,
              waiters_.size(), reservations_.size(), duplicates_, accounting_errors_};
  for (const auto& [key, frame] : frames_) {
    if (key.purpose == v1::MOVE || key.purpose == v1::SUM || key.purpose == v1::SERVE) continue;
    ++stats.stored_by_link[{key.purpose == v1::TEACH, key.replica, key.boundary, key.direction}];
  }
  return stats;
}

void Mailbox::GrantReservationsLocked(std::vector<Completion>& out) {
  while (!reservations_.empty() && reserved_ + reservations_.front().bytes <= budget_) {
    reserved_ += reservations_.front().bytes;
    out.push_back(std::move(reservations_.front().granted));
    reservations_.pop_front();
  }
}

std::map<MailboxKey, FramePtr>::iterator Mailbox::EraseFrameLocked(
    std::map<MailboxKey, FramePtr>::iterator it, std::vector<Completion>& out) {
  const FramePtr& frame = it->second;
  if (frame->wire_bytes() > stored_bytes_) {
    AccountingErrorLocked(absl::StrCat("a stored frame of ", frame->wire_bytes(), " bytes; ",
                                       stored_bytes_, " stored in all"))
        .IgnoreError();  // Counted and logged; the frame goes either way.
  } else {
    stored_bytes_ -= frame->wire_bytes();
  }
  UnreserveLocked(frame->wire_bytes(), /*credit=*/false, "of a stored frame freed")
      .IgnoreError();  // Counted and logged; the frame goes either way.
  if (!frame->complete()) out.push_back([frame] { frame->BreakOff(); });
  return frames_.erase(it);
}

void Mailbox::TrimAckedLocked() {
  if (newest_step_ < kAckedStepWindow) return;
  const uint64_t oldest_kept = newest_step_ - kAckedStepWindow;
  // Keys sort by generation, then step: each generation's old steps are a prefix of its keys, so
  // this runs once per acknowledgement without walking the thousands of keys it keeps.
  for (auto it = acked_.begin(); it != acked_.end();) {
    const uint32_t generation = it->generation;
    acked_.erase(it, acked_.lower_bound(FirstKeyOf(generation, oldest_kept)));
    if (generation == std::numeric_limits<uint32_t>::max()) break;
    it = acked_.lower_bound(FirstKeyOf(generation + 1, 0));
  }
}

absl::Status Mailbox::UnreserveLocked(uint64_t bytes, bool credit, const char* what) {
  if (bytes > reserved_ || (credit && bytes > credit_)) {
    return AccountingErrorLocked(absl::StrCat(bytes, " bytes ", what, "; ", reserved_,
                                              " reserved, ", credit_, " of them credit"));
  }
  reserved_ -= bytes;
  if (credit) credit_ -= bytes;
  return absl::OkStatus();
}

absl::Status Mailbox::AccountingErrorLocked(const std::string& message) {
  ++accounting_errors_;
  spdlog::error("mailbox accounting: {} (a bug; please report it)", message);
  assert(false && "mailbox accounting invariant broken");
  return absl::InternalError(absl::StrCat("mailbox accounting: ", message));
}

}  // namespace strait::gateway
