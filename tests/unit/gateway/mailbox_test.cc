#include "gateway/mailbox/mailbox.h"

#include <gtest/gtest.h>

#include "test_frames.h"

namespace strait::gateway {
namespace {

using testing::ArrivingFrame;
using testing::Frame;
using testing::Key;
using Clock = Mailbox::Clock;

const Clock::time_point kFar = Clock::now() + std::chrono::hours(1);

// Starts a pull under a fresh id (pull ids are the caller's: see Mailbox::Pull).
void StartPull(Mailbox& mailbox, const MailboxKey& key, Clock::time_point deadline,
               Mailbox::PullDone done) {
  ASSERT_TRUE(mailbox.Pull(mailbox.NewPullId(), key, deadline, std::move(done)).ok());
}

// Reserves synchronously (the budget must have room) and stores.
void Push(Mailbox& mailbox, const v1::TensorKey& key, uint64_t bytes) {
  ASSERT_TRUE(*mailbox.Reserve(bytes, [] {}));
  mailbox.Store(Frame(key, bytes));
}

TEST(MailboxTest, PullAfterPushIsServedAtOnce) {
  Mailbox mailbox(1000);
  Push(mailbox, Key(1, 0, 0, v1::FORWARD), 10);
  FramePtr got;
  StartPull(mailbox, MailboxKey::From(Key(1, 0, 0, v1::FORWARD)), kFar,
            [&](absl::StatusOr<FramePtr> f) { got = *f; });
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->wire_bytes(), 10u);
}

TEST(MailboxTest, PullBeforePushWaitsAndIsServedWhenItArrives) {
  Mailbox mailbox(1000);
  int calls = 0;
  StartPull(mailbox, MailboxKey::From(Key(1, 2, 1, v1::BACKWARD)), kFar,
            [&](absl::StatusOr<FramePtr> f) {
              ASSERT_TRUE(f.ok());
              EXPECT_EQ((*f)->header.key().microbatch(), 2u);
              ++calls;
            });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(mailbox.GetStats().waiting_pulls, 1u);
  Push(mailbox, Key(1, 1, 1, v1::BACKWARD), 10);  // another key: still waiting
  EXPECT_EQ(calls, 0);
  Push(mailbox, Key(1, 2, 1, v1::BACKWARD), 10);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(mailbox.GetStats().waiting_pulls, 0u);
}

TEST(MailboxTest, DuplicatePushIsIdempotent) {
  Mailbox mailbox(1000);
  Push(mailbox, Key(1, 0, 0, v1::FORWARD), 100);
  ASSERT_TRUE(*mailbox.Reserve(100, [] {}));
  EXPECT_EQ(mailbox.Store(Frame(Key(1, 0, 0, v1::FORWARD), 100)), Mailbox::StoreResult::kDuplicate);
  Mailbox::Stats stats = mailbox.GetStats();
  EXPECT_EQ(stats.stored_frames, 1u);
  EXPECT_EQ(stats.stored_bytes, 100u);
  EXPECT_EQ(stats.reserved_bytes, 100u);  // the duplicate's reservation was released
  EXPECT_EQ(stats.duplicates, 1u);
}

TEST(MailboxTest, AckForgetsTheFrameAndAPushRetriedAfterAckIsDropped) {
  Mailbox mailbox(1000);
  const MailboxKey key = MailboxKey::From(Key(3, 1, 0, v1::FORWARD));
  Push(mailbox, Key(3, 1, 0, v1::FORWARD), 100);
  ASSERT_TRUE(mailbox.Ack(key).ok());
  EXPECT_EQ(mailbox.GetStats().stored_frames, 0u);
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 0u);
  EXPECT_TRUE(mailbox.Ack(key).ok());  // a second ack (retry) is harmless
  ASSERT_TRUE(*mailbox.Reserve(100, [] {}));
  EXPECT_EQ(mailbox.Store(Frame(Key(3, 1, 0, v1::FORWARD), 100)), Mailbox::StoreResult::kDuplicate);
  EXPECT_EQ(mailbox.GetStats().stored_frames, 0u);
  EXPECT_EQ(mailbox.Ack(MailboxKey::From(Key(9, 0, 0, v1::FORWARD))).code(),
            absl::StatusCode::kNotFound);
}

TEST(MailboxTest, FullBudgetMakesProducersWaitUntilAnAckFreesSpace) {
  Mailbox mailbox(250);
  Push(mailbox, Key(1, 0, 0, v1::FORWARD), 100);
  Push(mailbox, Key(1, 1, 0, v1::FORWARD), 100);
  bool first_granted = false, second_granted = false;
  ASSERT_FALSE(*mailbox.Reserve(100, [&] { first_granted = true; }));
  ASSERT_FALSE(*mailbox.Reserve(10, [&] { second_granted = true; }));  // queued behind the first
  EXPECT_EQ(mailbox.GetStats().waiting_reservations, 2u);
  EXPECT_FALSE(first_granted);
  ASSERT_TRUE(mailbox.Ack(MailboxKey::From(Key(1, 0, 0, v1::FORWARD))).ok());
  EXPECT_TRUE(first_granted);
  EXPECT_TRUE(second_granted);
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 210u);
  EXPECT_LE(mailbox.GetStats().reserved_bytes, 250u);
}

TEST(MailboxTest, FrameLargerThanTheBudgetIsRefused) {
  Mailbox mailbox(100);
  auto reserved = mailbox.Reserve(101, [] {});
  EXPECT_EQ(reserved.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(MailboxTest, ReleaseReturnsAnAbandonedReservation) {
  Mailbox mailbox(100);
  ASSERT_TRUE(*mailbox.Reserve(80, [] {}));
  bool granted = false;
  ASSERT_FALSE(*mailbox.Reserve(50, [&] { granted = true; }));
  EXPECT_TRUE(mailbox.Release(80).ok());
  EXPECT_TRUE(granted);
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 50u);
}

TEST(MailboxTest, PullsExpireAtTheirDeadline) {
  Mailbox mailbox(100);
  const Clock::time_point now = Clock::now();
  absl::Status early, late;
  StartPull(mailbox, MailboxKey::From(Key(1, 0, 0, v1::FORWARD)), now + std::chrono::seconds(1),
            [&](absl::StatusOr<FramePtr> f) { early = f.status(); });
  StartPull(mailbox, MailboxKey::From(Key(1, 1, 0, v1::FORWARD)), now + std::chrono::seconds(5),
            [&](absl::StatusOr<FramePtr> f) { late = f.status(); });
  mailbox.ExpirePulls(now + std::chrono::seconds(2));
  EXPECT_EQ(early.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(late.ok());  // untouched: still waiting
  EXPECT_EQ(mailbox.GetStats().waiting_pulls, 1u);
}

TEST(MailboxTest, CancelledPullIsNeverCalled) {
  Mailbox mailbox(100);
  bool called = false;
  const uint64_t id = mailbox.NewPullId();
  ASSERT_TRUE(mailbox
                  .Pull(id, MailboxKey::From(Key(1, 0, 0, v1::FORWARD)), kFar,
                        [&](absl::StatusOr<FramePtr>) { called = true; })
                  .ok());
  mailbox.CancelPull(id);
  Push(mailbox, Key(1, 0, 0, v1::FORWARD), 10);
  EXPECT_FALSE(called);
}

TEST(MailboxTest, PurgeDropsOldGenerationsAndAbortsTheirPulls) {
  Mailbox mailbox(1000);
  Push(mailbox, Key(5, 0, 0, v1::FORWARD, /*generation=*/0), 100);
  Push(mailbox, Key(5, 1, 0, v1::FORWARD, /*generation=*/1), 100);
  absl::Status aborted;
  StartPull(mailbox, MailboxKey::From(Key(6, 0, 0, v1::FORWARD, 0)), kFar,
            [&](absl::StatusOr<FramePtr> f) { aborted = f.status(); });
  mailbox.PurgeGenerationsBelow(1);
  EXPECT_EQ(aborted.code(), absl::StatusCode::kAborted);
  Mailbox::Stats stats = mailbox.GetStats();
  EXPECT_EQ(stats.stored_frames, 1u);
  EXPECT_EQ(stats.stored_bytes, 100u);
  EXPECT_EQ(stats.reserved_bytes, 100u);
  // The same key in the new generation is a new frame, not a duplicate.
  ASSERT_TRUE(*mailbox.Reserve(100, [] {}));
  EXPECT_EQ(mailbox.Store(Frame(Key(5, 0, 0, v1::FORWARD, 2), 100)), Mailbox::StoreResult::kStored);
}

TEST(MailboxTest, PushesAndPullsOfAPurgedGenerationAreStale) {
  Mailbox mailbox(300);
  mailbox.PurgeGenerationsBelow(2);
  // A push that was in flight when the rollback happened: dropped, its reservation returned.
  ASSERT_TRUE(*mailbox.Reserve(300, [] {}));
  EXPECT_EQ(mailbox.Store(Frame(Key(3, 0, 0, v1::FORWARD, 1), 300)), Mailbox::StoreResult::kStale);
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 0u);
  EXPECT_EQ(mailbox.GetStats().stored_frames, 0u);
  // A pull of it would wait forever: refused at once.
  absl::Status status;
  StartPull(mailbox, MailboxKey::From(Key(3, 0, 0, v1::FORWARD, 1)), kFar,
            [&](absl::StatusOr<FramePtr> f) { status = f.status(); });
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(mailbox.GetStats().waiting_pulls, 0u);
}

TEST(MailboxTest, CreditComesFromSpareBudgetWithinItsLimitAndNeverAheadOfAWaitingFrame) {
  Mailbox mailbox(1000, /*credit_limit_bytes=*/600);
  EXPECT_EQ(mailbox.GrantCredit(500, 100), 500u);
  EXPECT_EQ(mailbox.GrantCredit(500, 200), 0u);  // only 100 left under the limit: below the minimum
  EXPECT_EQ(mailbox.GrantCredit(500, 100), 100u);
  EXPECT_EQ(mailbox.GetStats().credit_bytes, 600u);
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 600u);
  // Credit funds a frame: it becomes that frame's reservation.
  EXPECT_TRUE(mailbox.UseCredit(300).ok());
  EXPECT_EQ(mailbox.Store(Frame(Key(1, 0, 0, v1::FORWARD), 300)), Mailbox::StoreResult::kStored);
  EXPECT_EQ(mailbox.GetStats().credit_bytes, 300u);
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 600u);
  // A frame waiting for memory is served before any new credit.
  bool granted = false;
  EXPECT_FALSE(*mailbox.Reserve(500, [&] { granted = true; }));
  EXPECT_EQ(mailbox.GrantCredit(100, 1), 0u);
  EXPECT_TRUE(mailbox.ReleaseCredit(300).ok());  // its stream ended
  EXPECT_TRUE(granted);
  EXPECT_EQ(mailbox.GetStats().credit_bytes, 0u);
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 800u);
  EXPECT_EQ(mailbox.GrantCredit(1000, 1), 200u);  // the rest of the budget, within the limit
}

TEST(MailboxTest, HoldsKnowsStoredAndAcknowledgedKeys) {
  Mailbox mailbox(1000);
  const v1::TensorKey key = Key(1, 0, 0, v1::FORWARD);
  EXPECT_FALSE(mailbox.Holds(MailboxKey::From(key)));
  Push(mailbox, key, 10);
  EXPECT_TRUE(mailbox.Holds(MailboxKey::From(key)));
  ASSERT_TRUE(mailbox.Ack(MailboxKey::From(key)).ok());
  EXPECT_TRUE(mailbox.Holds(MailboxKey::From(key)));  // a retried push would be a duplicate
}

TEST(MailboxTest, AcknowledgedKeysFarBehindTheNewestStepAreForgottenInEveryGeneration) {
  Mailbox mailbox(1 << 20);
  auto push_and_ack = [&](uint64_t step, uint32_t generation) {
    const v1::TensorKey key = Key(step, 0, 0, v1::FORWARD, generation);
    Push(mailbox, key, 10);
    ASSERT_TRUE(mailbox.Ack(MailboxKey::From(key)).ok());
  };
  push_and_ack(0, 1);
  push_and_ack(5, 1);
  for (uint64_t step = 0; step <= 20; ++step) push_and_ack(step, 2);
  // 16 steps behind step 20 are kept: step 4 and later, in both generations.
  for (uint32_t generation : {1u, 2u}) {
    EXPECT_FALSE(mailbox.Holds(MailboxKey::From(Key(0, 0, 0, v1::FORWARD, generation))));
    EXPECT_TRUE(mailbox.Holds(MailboxKey::From(Key(5, 0, 0, v1::FORWARD, generation))));
  }
  EXPECT_FALSE(mailbox.Holds(MailboxKey::From(Key(3, 0, 0, v1::FORWARD, 2))));
  EXPECT_TRUE(mailbox.Holds(MailboxKey::From(Key(4, 0, 0, v1::FORWARD, 2))));
  EXPECT_TRUE(mailbox.Holds(MailboxKey::From(Key(20, 0, 0, v1::FORWARD, 2))));
}

// Frames stream through: a pull is served from a frame's first chunk on.
TEST(MailboxTest, APullIsServedByAFrameStillArriving) {
  Mailbox mailbox(1000);
  const v1::TensorKey key = Key(1, 0, 0, v1::FORWARD);
  FramePtr got;
  StartPull(mailbox, MailboxKey::From(key), kFar, [&](absl::StatusOr<FramePtr> f) { got = *f; });
  auto frame = ArrivingFrame(key, 3);
  ASSERT_TRUE(*mailbox.Reserve(frame->wire_bytes(), [] {}));
  frame->AddChunk("0123456789");
  EXPECT_EQ(mailbox.Store(frame), Mailbox::StoreResult::kStored);
  ASSERT_EQ(got, frame);  // served before the rest of the frame arrived
  EXPECT_EQ(got->available(), 1u);
  // Nobody can have opened it yet: an ack is refused, and a retried push is not a duplicate.
  EXPECT_EQ(mailbox.Ack(MailboxKey::From(key)).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(mailbox.Holds(MailboxKey::From(key)));
  frame->AddChunk("0123456789");
  frame->AddChunk("0123456789");
  EXPECT_TRUE(mailbox.Holds(MailboxKey::From(key)));
  EXPECT_TRUE(mailbox.Ack(MailboxKey::From(key)).ok());
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 0u);
}

TEST(MailboxTest, AnAbandonedFrameIsForgottenBrokenOffAndItsBytesFreed) {
  Mailbox mailbox(1000);
  const v1::TensorKey key = Key(1, 0, 0, v1::FORWARD);
  auto frame = ArrivingFrame(key, 3);
  ASSERT_TRUE(*mailbox.Reserve(30, [] {}));
  frame->AddChunk("0123456789");
  mailbox.Store(frame);
  mailbox.Abandon(frame);
  EXPECT_TRUE(frame->broken());
  EXPECT_EQ(mailbox.GetStats().stored_frames, 0u);
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 0u);
  mailbox.Abandon(frame);  // twice: nothing more to free
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 0u);
  // A pull now waits for the producer's next push.
  FramePtr got;
  StartPull(mailbox, MailboxKey::From(key), kFar, [&](absl::StatusOr<FramePtr> f) { got = *f; });
  EXPECT_EQ(got, nullptr);
  Push(mailbox, key, 30);
  ASSERT_NE(got, nullptr);
  EXPECT_TRUE(got->complete());
}

TEST(MailboxTest, AFrameBrokenOffIsNotServedEvenBeforeItsSessionAbandonsIt) {
  Mailbox mailbox(1000);
  const v1::TensorKey key = Key(1, 0, 0, v1::FORWARD);
  auto frame = ArrivingFrame(key, 3);
  ASSERT_TRUE(*mailbox.Reserve(30, [] {}));
  mailbox.Store(frame);
  frame->BreakOff();  // its transfer failed; the session calls Abandon right after
  int calls = 0;
  StartPull(mailbox, MailboxKey::From(key), kFar, [&](absl::StatusOr<FramePtr>) { ++calls; });
  EXPECT_EQ(calls, 0);  // a delivery that restarts must not get the same broken frame again
  mailbox.Abandon(frame);
  Push(mailbox, key, 30);
  EXPECT_EQ(calls, 1);
}

TEST(MailboxTest, ANewPushReplacesAFrameStillArrivingAndTheOldTransferFreesNothing) {
  Mailbox mailbox(1000);
  const v1::TensorKey key = Key(1, 0, 0, v1::FORWARD);
  auto old_frame = ArrivingFrame(key, 3);
  ASSERT_TRUE(*mailbox.Reserve(30, [] {}));
  mailbox.Store(old_frame);
  // The producer reconnected and pushes the key again: the new frame wins, the old one breaks off.
  ASSERT_TRUE(*mailbox.Reserve(30, [] {}));
  auto new_frame = ArrivingFrame(key, 3);
  EXPECT_EQ(mailbox.Store(new_frame), Mailbox::StoreResult::kStored);
  EXPECT_TRUE(old_frame->broken());
  EXPECT_EQ(mailbox.GetStats().stored_frames, 1u);
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 30u);
  mailbox.Abandon(old_frame);  // the old stream ends later: the new frame stays
  EXPECT_EQ(mailbox.GetStats().stored_frames, 1u);
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 30u);
  EXPECT_FALSE(new_frame->broken());
  // A broken frame is never served: a pull gets the one that replaced it.
  FramePtr got;
  StartPull(mailbox, MailboxKey::From(key), kFar, [&](absl::StatusOr<FramePtr> f) { got = *f; });
  EXPECT_EQ(got, new_frame);
}

TEST(MailboxTest, PurgeBreaksOffFramesStillArriving) {
  Mailbox mailbox(1000);
  auto frame = ArrivingFrame(Key(1, 0, 0, v1::FORWARD, /*generation=*/0), 2);
  ASSERT_TRUE(*mailbox.Reserve(20, [] {}));
  mailbox.Store(frame);
  mailbox.PurgeGenerationsBelow(1);
  EXPECT_TRUE(frame->broken());
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 0u);
  mailbox.Abandon(frame);
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 0u);
}

// The caller names its pulls, so it can record a pull before the mailbox may complete it (at once,
// when the frame is there) and cancel it later; an id still waiting cannot be used again.
TEST(MailboxTest, PullIdsComeFromTheCaller) {
  Mailbox mailbox(1000);
  const uint64_t first = mailbox.NewPullId(), second = mailbox.NewPullId();
  EXPECT_NE(first, second);
  EXPECT_NE(first, 0u);
  Push(mailbox, Key(1, 0, 0, v1::FORWARD), 10);
  FramePtr got;
  EXPECT_TRUE(mailbox
                  .Pull(first, MailboxKey::From(Key(1, 0, 0, v1::FORWARD)), kFar,
                        [&](absl::StatusOr<FramePtr> f) { got = *f; })
                  .ok());
  EXPECT_NE(got, nullptr);  // completed before Pull returned
  EXPECT_TRUE(
      mailbox.Pull(second, MailboxKey::From(Key(2, 0, 0, v1::FORWARD)), kFar, [](auto) {}).ok());
  absl::Status reused;
  EXPECT_DEBUG_DEATH(
      reused = mailbox.Pull(second, MailboxKey::From(Key(3, 0, 0, v1::FORWARD)), kFar, [](auto) {}),
      "accounting");
#ifdef NDEBUG
  EXPECT_EQ(reused.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(mailbox.GetStats().accounting_errors, 1u);
#endif
  EXPECT_EQ(mailbox.GetStats().waiting_pulls, 1u);
}

// Returning more bytes than are reserved, or more credit than is outstanding, is a bug: an error,
// counted, and a failed assert in debug builds; the books are left as they were, never clamped.
TEST(MailboxTest, BrokenAccountingIsAnErrorAndIsNeverClamped) {
  Mailbox mailbox(1000, /*credit_limit_bytes=*/500);
  ASSERT_TRUE(*mailbox.Reserve(100, [] {}));
  ASSERT_EQ(mailbox.GrantCredit(200, 1), 200u);
  absl::Status released, used, returned;
  EXPECT_DEBUG_DEATH(released = mailbox.Release(301), "accounting");
  EXPECT_DEBUG_DEATH(used = mailbox.UseCredit(201), "accounting");
  EXPECT_DEBUG_DEATH(returned = mailbox.ReleaseCredit(201), "accounting");
#ifdef NDEBUG
  EXPECT_EQ(released.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(used.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(returned.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(mailbox.GetStats().accounting_errors, 3u);
#endif
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 300u);
  EXPECT_EQ(mailbox.GetStats().credit_bytes, 200u);
  // The exact amounts balance the books.
  EXPECT_TRUE(mailbox.UseCredit(50).ok());
  EXPECT_TRUE(mailbox.ReleaseCredit(150).ok());
  EXPECT_TRUE(mailbox.Release(150).ok());
  EXPECT_EQ(mailbox.GetStats().reserved_bytes, 0u);
  EXPECT_EQ(mailbox.GetStats().credit_bytes, 0u);
}

}  // namespace
}  // namespace strait::gateway
