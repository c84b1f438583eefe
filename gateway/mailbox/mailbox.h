// The gateway's parameter-server store: frames pushed by key, pulled by key (DESIGN.md §4, §7).
//
// A push stores its frame from its first chunk on (frames stream through: stored_frame.h) until its
// consumer acknowledges it; a pull of a key not pushed yet waits until the frame's first chunk
// arrives, the pull's deadline passes, or the key's generation is purged. Pushes are idempotent: a
// key whose frame is held complete or was acknowledged is not stored again, while a frame still
// arriving is replaced by a new push of its key (its producer pushes again after a reconnect; the
// old transfer is dead or about to be). Memory is bounded: a frame's bytes are reserved before its
// body is sent (an offer's grant, or standing credit), and when the budget is full the reservation
// waits (the producer's offer is not granted) until an acknowledgement or a purge frees space.
//
// Byte accounting is exact: returning more than is reserved, or using more credit than is granted,
// is a bug in the caller. Such a call changes nothing, returns INTERNAL, is counted
// (Stats::accounting_errors) and logged, and fails an assert in debug builds.
//
// Thread-safe. Callbacks (pull completions, reservation grants) never run under the mailbox's lock;
// they run on the thread whose call satisfied them (Store, Ack, Purge, ExpirePulls, or the caller
// of Pull / Reserve itself), so they must be quick and must not block.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "gateway/mailbox/stored_frame.h"

namespace strait::gateway {

class Mailbox {
 public:
  using Clock = std::chrono::steady_clock;
  using PullDone = std::function<void(absl::StatusOr<FramePtr>)>;

  // `budget_bytes`: the most frame bytes held or reserved at once, standing credit included.
  // `credit_limit_bytes`: the most of it that may be standing credit at once (see GrantCredit);
  // keep at least one largest frame out of it, so that a frame waiting for a reservation is granted
  // once the stored frames are acknowledged, however much credit idle producers hold.
  explicit Mailbox(uint64_t budget_bytes, uint64_t credit_limit_bytes = 0);
  ~Mailbox();

  // Reserves `bytes` for a frame about to be received. Returns true when reserved now. Otherwise
  // returns false and calls `granted` once, later, when the reservation has been made. A frame
  // larger than the whole budget can never fit: RESOURCE_EXHAUSTED (and `granted` is dropped).
  absl::StatusOr<bool> Reserve(uint64_t bytes, std::function<void()> granted);
  // Returns a reservation that will not be stored (the transfer broke off). INTERNAL (and nothing
  // changes) when fewer than `bytes` are reserved.
  absl::Status Release(uint64_t bytes);

  // Standing credit: bytes reserved for a producer's frames before it names them, so that with
  // spare budget a push needs no round trip (gateway.proto, Hello). Reserves and returns between
  // `min_bytes` and `want_bytes`, or 0: only while no reservation is waiting (credit never
  // overtakes a frame waiting for memory), within the budget and within the credit limit. Never
  // calls back.
  uint64_t GrantCredit(uint64_t want_bytes, uint64_t min_bytes);
  // `bytes` of granted credit now fund a frame: they become an ordinary reservation (Store or
  // Release it as usual). Never calls back. INTERNAL (and nothing changes) when less than `bytes`
  // of credit is outstanding.
  absl::Status UseCredit(uint64_t bytes);
  // Returns unused credit (its stream ended); grants waiting reservations that now fit. INTERNAL
  // (and nothing changes) when less than `bytes` of credit is outstanding.
  absl::Status ReleaseCredit(uint64_t bytes);

  // True when a push of `key` would be dropped: held complete or acknowledged already (a
  // duplicate), or of a purged generation (stale).
  bool Holds(const MailboxKey& key) const;

  enum class StoreResult { kStored, kDuplicate, kStale };
  // Stores a frame, complete or with its first chunks (the rest follow into the same frame), whose
  // wire_bytes were reserved; takes over the reservation. A duplicate (Holds) or a frame of a
  // purged generation (stale) is dropped and its reservation released. A frame of the same key
  // still arriving is replaced and broken off. Waiting pulls of the key are served at once.
  StoreResult Store(FramePtr frame);
  // The transfer of a stored frame failed before it was complete: forgets the frame unless it was
  // replaced or dropped already, frees its bytes, and breaks it off (its deliveries restart).
  void Abandon(const FramePtr& frame);

  // A pull id no other pull of this mailbox has (for Pull). Thread-safe; never 0.
  uint64_t NewPullId();
  // Serves the frame of `key` through `done`, now (frame present, complete or still arriving) or
  // later (when it is stored); or with DEADLINE_EXCEEDED once `deadline` has passed (see
  // ExpirePulls), or ABORTED when the key's generation is (or was already) purged. `pull_id` comes
  // from NewPullId and names the pull for CancelPull; the caller records it before calling, since
  // `done` may run before Pull returns. INTERNAL (and `done` is dropped) when `pull_id` names a
  // pull still waiting.
  absl::Status Pull(uint64_t pull_id, const MailboxKey& key, Clock::time_point deadline,
                    PullDone done);
  // Drops a waiting pull without calling it (its stream went away). No-op for finished pulls.
  void CancelPull(uint64_t pull_id);
  // Completes waiting pulls whose deadline is before `now` with DEADLINE_EXCEEDED.
  void ExpirePulls(Clock::time_point now);

  // The consumer has the frame: forget it and free its bytes. NOT_FOUND when the key is not stored,
  // FAILED_PRECONDITION when its frame is still arriving (nobody can have opened it yet).
  absl::Status Ack(const MailboxKey& key);

  // Drops every stored frame (breaking off those still arriving), remembered acknowledgement and
  // waiting pull (ABORTED) of generations below `generation` (a rollback started a new one),
  // freeing their bytes. Later pushes and pulls of those generations are refused as stale.
  void PurgeGenerationsBelow(uint32_t generation);

  struct Stats {
    uint64_t stored_frames = 0;
    uint64_t stored_bytes = 0;    // Bytes of stored frames.
    uint64_t reserved_bytes = 0;  // Stored plus reserved for frames in transit plus credit.
    uint64_t credit_bytes = 0;    // Standing credit granted and not yet used or returned.
    uint64_t budget_bytes = 0;
    uint64_t waiting_pulls = 0;
    uint64_t waiting_reservations = 0;
    uint64_t duplicates = 0;         // Pushes dropped as duplicates since start.
    uint64_t accounting_errors = 0;  // Broken accounting invariants (bugs) since start.
    // Stored frames on the pipelines' links (every purpose but MOVE and SUM, which cross no
    // boundary) by (teacher link, replica, boundary, direction): each link's queue.
    std::map<std::tuple<bool, uint32_t, uint32_t, int>, uint64_t> stored_by_link;
  };
  Stats GetStats() const;

 private:
  struct Waiter {
    MailboxKey key;
    Clock::time_point deadline;
    PullDone done;
  };
  struct Reservation {
    uint64_t bytes;
    std::function<void()> granted;
  };
  using Completion = std::function<void()>;

  // Grants queued reservations in arrival order while they fit. Called with mu_ held; appends the
  // grant callbacks to `out` to run after unlocking.
  void GrantReservationsLocked(std::vector<Completion>& out);
  // Forgets the stored frame at `it` and frees its bytes; a frame still arriving is broken off by a
  // completion appended to `out`. Called with mu_ held.
  std::map<MailboxKey, FramePtr>::iterator EraseFrameLocked(
      std::map<MailboxKey, FramePtr>::iterator it, std::vector<Completion>& out);
  // Forgets acknowledged keys far behind the newest step (their pushes can no longer be retried).
  void TrimAckedLocked();
  // Takes `bytes` off reserved_ (and off credit_ when `credit`), or reports a broken invariant
  // (AccountingErrorLocked) and changes nothing. Called with mu_ held.
  absl::Status UnreserveLocked(uint64_t bytes, bool credit, const char* what);
  // Counts and logs a broken accounting invariant, fails an assert in debug builds, and returns
  // INTERNAL with `message`. Called with mu_ held.
  absl::Status AccountingErrorLocked(const std::string& message);

  mutable std::mutex mu_;
  const uint64_t budget_;
  const uint64_t credit_limit_;
  uint64_t reserved_ = 0;  // Includes the bytes of stored frames and standing credit.
  uint64_t credit_ = 0;    // Standing credit outstanding (part of reserved_).
  uint64_t stored_bytes_ = 0;
  uint64_t duplicates_ = 0;
  uint64_t accounting_errors_ = 0;
  std::atomic<uint64_t> next_pull_id_{1};
  uint64_t newest_step_ = 0;
  uint32_t min_generation_ = 0;  // Generations below it were purged.
  std::map<MailboxKey, FramePtr> frames_;
  std::set<MailboxKey> acked_;            // Keys delivered and acknowledged.
  std::map<uint64_t, Waiter> waiters_;    // By pull id.
  std::deque<Reservation> reservations_;  // Waiting for budget, first come first served.
};

}  // namespace strait::gateway
