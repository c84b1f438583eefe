// The gateway's handling of one site's Exchange stream, message by message (DESIGN.md §4, §5):
// Hello binds the stream to the site's current epoch; pushes are reassembled, authorized, admitted
// under the memory budget (standing credit, a grant per offered frame, or, for producers that do
// not follow the credit protocol, by not reading on until memory frees: gateway.proto, Hello) and
// stored from their first chunk on; pulls are authorized and served as the frame's chunks arrive;
// acks free the mailbox; heartbeats and reports feed the federation's view. Every malformed or
// unauthorized message is answered with an error, counted, and the stream stays usable.
//
// Not thread-safe: the owner feeds one message at a time (gRPC's reactor does). Replies go out
// through the SiteChannel, from this thread or from whichever thread completes a pull.
#pragma once

#include <cstdint>
#include <functional>
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

  // Handles one message. Returns true when the caller may read the next message now; false when a
  // push waits for memory, in which case `resume` is called exactly once, from another thread, when
  // reading may continue (the caller must not read before).
  bool Handle(v1::SiteMessage message, std::function<void()> resume);

  // The stream ended: returns memory reserved for incomplete pushes, cancels waiting pulls, and
  // detaches from the federation. Idempotent.
  void Close();

 private:
  class PullTracker;
  struct Liveness;

  void OnHello(const v1::Hello& hello);
  bool OnPush(v1::PushChunk chunk, std::function<void()> resume);
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
  void Completed(const StoredFrame& frame, uint64_t transfer_id);
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
  int stage_ = -1;          // Set by Hello.
  bool push_only_ = false;  // Set by Hello: this is the site's push stream.
  FrameAssembler assembler_;
  std::set<uint64_t> refused_transfers_;  // Their later chunks are dropped quietly.
  std::shared_ptr<PullTracker> pulls_;
  std::shared_ptr<Liveness> liveness_;
  // A frame offered (PushOffer) and not yet started: `bytes` are reserved once `granted`.
  struct Offer {
    uint64_t bytes = 0;
    bool granted = false;
  };

  // Guarded by liveness_->mu (reservation grants arrive on other threads):
  // A started transfer still waiting for its reservation (producers without the credit protocol).
  std::optional<uint64_t> unreserved_transfer_;
  std::map<uint64_t, Offer> offers_;  // By transfer id.
  uint64_t credit_ = 0;               // Standing credit the site holds (reserved in the mailbox).
  bool wants_credit_ = false;         // Set by a push stream's Hello with `credit`.
  bool closed_ = false;
};

}  // namespace strait::gateway
