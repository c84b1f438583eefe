// The gateway's handling of one site's Exchange stream, message by message (DESIGN.md §4, §5):
// Hello binds the stream to the site's current epoch; pushes are reassembled, authorized, admitted
// under the memory budget and stored from their first chunk on; pulls are authorized and served as
// the frame's chunks arrive; acks free the mailbox; heartbeats and reports feed the federation's
// view. Every malformed, unauthorized or unfunded message is answered with an error, counted, and
// the stream stays usable.
//
// Admission (gateway.proto, Hello) has one path: a frame's bytes are reserved before its body is
// sent, by the stream's standing credit or by the grant of its PushOffer. A push funded by neither
// is refused with FAILED_PRECONDITION and counted as "unfunded"; the gateway never stops reading a
// stream to wait for memory, so no body ever waits in gRPC's buffers.
//
// Not thread-safe: the owner feeds one message at a time (gRPC's reactor does). Replies go out
// through the SiteChannel, from this thread or from whichever thread completes a pull.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "gateway/exchange/gateway_core.h"
#include "gateway/mailbox/frame_assembler.h"
#include "gateway/membership/site_channel.h"
#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

class ExchangeSession {
 public:
  // `site_id` is the stream's verified certificate identity. `core` must outlive the session.
  ExchangeSession(GatewayCore& core, std::string site_id, std::shared_ptr<SiteChannel> channel);
  // Calls Close().
  ~ExchangeSession();

  // Handles one message; never blocks. The caller may read the next message as soon as it returns.
  void Handle(v1::SiteMessage message);

  // The stream ended: returns memory reserved for incomplete pushes, cancels waiting pulls, and
  // detaches from the federation. Idempotent.
  void Close();

 private:
  class PullTracker;
  struct Liveness;
  // A frame offered (PushOffer) and not yet started: `bytes` are reserved once `granted`.
  struct Offer {
    uint64_t bytes = 0;
    bool granted = false;
  };

  void OnHello(const v1::Hello& hello);
  void OnPush(v1::PushChunk chunk);
  // Chunk 0 of `transfer_id` arrived: takes its offer (nullopt when it was not offered). The
  // reservation of an offer not granted yet is returned when it comes (OnOffer's callback).
  std::optional<Offer> TakeOffer(uint64_t transfer_id);
  // Funds a frame pushed without an offer from the stream's standing credit. FAILED_PRECONDITION
  // when the credit left does not cover `bytes`; INTERNAL when the mailbox's accounting disagrees.
  absl::Status FundFromCredit(uint64_t transfer_id, uint64_t bytes);
  void OnOffer(const v1::PushOffer& offer);
  // Tops the stream's standing credit up towards GatewayCore::push_credit_bytes() from spare budget
  // and tells the site, once the credit has fallen by a quarter or below one largest frame.
  // Requires liveness_->mu held and the stream open.
  void TopUpCreditLocked();
  void SendPushGrant(uint64_t transfer_id);
  void OnPull(const v1::Pull& pull);
  void OnAck(const v1::Ack& ack);
  // Stores a frame whose bytes are reserved, from its first chunk on (its deliveries start at
  // once); acknowledges it to the producer when it is complete, or at once when the mailbox holds
  // its key.
  void Publish(const std::shared_ptr<StoredFrame>& frame, uint64_t transfer_id);
  // Forgets a transfer that is not stored; its later chunks are dropped quietly.
  void DropTransfer(uint64_t transfer_id);
  // Refuses a whole transfer: drops it, counts it under `reason` and tells its producer `status`.
  void RefusePush(uint64_t transfer_id, const v1::TensorKey& key, const std::string& reason,
                  const absl::Status& status);
  // The last chunk of a stored frame arrived: acknowledges it to the producer.
  void Completed(const std::shared_ptr<StoredFrame>& frame, uint64_t transfer_id);
  // Serves pull `pull_id` of `key` from the mailbox; a delivery whose frame breaks off starts it
  // again. Static: its callbacks outlive the session and hold only shared state.
  static void StartPull(GatewayCore& core, std::shared_ptr<SiteChannel> channel,
                        std::shared_ptr<PullTracker> pulls, MailboxKey key, uint64_t pull_id,
                        Mailbox::Clock::time_point deadline);
  void SendError(absl::Status status);
  void SendPushAck(uint64_t transfer_id, const v1::TensorKey& key, const absl::Status& status);
  void Reject(const std::string& reason, const absl::Status& status);

  GatewayCore& core_;
  const std::string site_id_;
  std::shared_ptr<SiteChannel> channel_;
  int slot_ = -1;           // Set by Hello.
  bool push_only_ = false;  // Set by Hello: this is the site's push stream.
  FrameAssembler assembler_;
  std::set<uint64_t> refused_transfers_;  // Their later chunks are dropped quietly.
  std::shared_ptr<PullTracker> pulls_;
  std::shared_ptr<Liveness> liveness_;
  // Guarded by liveness_->mu (reservation grants arrive on other threads):
  std::map<uint64_t, Offer> offers_;  // By transfer id.
  uint64_t credit_ = 0;               // Standing credit the site holds (reserved in the mailbox).
  bool wants_credit_ = false;         // Set by a push stream's Hello with `credit`.
  bool closed_ = false;
};

}  // namespace strait::gateway
