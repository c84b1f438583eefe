// Membership and accounting of a federation as the gateway sees it (DESIGN.md §1, §5, §7, §8):
// which sites joined with which epoch and key, whose stream is attached, who is alive, what they
// report, and what crossed each link. Produces the FederationState that GetState, /api/state and
// /metrics show.
//
// Start and rollback (DESIGN.md §7): sites train only after the gateway's Rollback{step,
// generation} control. It is sent once every site is joined with its stream attached: at the start,
// and again after a site went down (the others are told to Pause) and came back. `step` is the
// newest checkpoint every site holds (0: the initial parameters); `generation` grows with each one,
// and the mailbox forgets every frame of older generations before the sites hear of the new one.
//
// Thread-safe (one mutex). Calls into SiteChannel (Send/Close) happen after the lock is released.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "core/job_view.h"
#include "gateway/mailbox/mailbox.h"
#include "gateway/membership/site_channel.h"
#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

class Federation {
 public:
  using Clock = std::chrono::steady_clock;

  // `spec` must outlive the federation; `view` is the split it starts from (a planned one: the
  // plan's, which SetSplit may change; its replica is unused).
  // `new_generation` is called (outside the lock) with each generation after the first, before any
  // site hears of it: the gateway purges older generations from the mailbox there. `site_down` is
  // called (outside the lock) with the slot of a site marked down: its replicas' open sums abort.
  //
  // Sites are numbered by slot (JobSpec::SiteSlots): the stage without replicas.
  Federation(const JobSpec& spec, const JobView& view,
             std::function<void(uint32_t)> new_generation = nullptr,
             std::function<void(int, const std::string&)> site_down = nullptr);

  // A site asks to join. `site_id` is its verified certificate identity. Checks the request against
  // the job spec (federation, layers, device, workers; key.site_id == site_id; an epoch newer than
  // the site's last). On success the site's older stream is closed, neighbours that are attached
  // receive the new key, and the reply carries the view and the keys of neighbours already joined.
  absl::StatusOr<v1::JoinReply> Join(const std::string& site_id, const v1::JoinRequest& request,
                                     Clock::time_point now);

  // An Exchange stream of `site_id` said Hello with `epoch`. A primary stream (`channel` not null)
  // becomes the site's stream for control messages; a push stream (`channel` null) is only checked.
  // FAILED_PRECONDITION when the epoch is not the one of the site's latest join. Returns the slot.
  absl::StatusOr<int> Attach(const std::string& site_id, uint32_t epoch,
                             std::shared_ptr<SiteChannel> channel, Clock::time_point now);
  // The stream `channel` of stage `site` ended. If it was the site's current stream, the site is
  // marked down and the others are told.
  void Detach(int site, const SiteChannel* channel, Clock::time_point now);

  // A planned split (JobSpec::SplitMayMove) planned again: `split` gives every site its layers from
  // the next Rollback on (which carries it; the sites move layers first). Joins until then may
  // claim either split's layers.
  absl::Status SetSplit(const std::vector<LayerRange>& split);

  // Records that stage `site` was heard from (any message).
  void Touch(int site, Clock::time_point now);
  void Report(int site, const v1::SiteReport& report, Clock::time_point now);
  // Marks attached sites silent for longer than the heartbeat timeout as down.
  void CheckHeartbeats(Clock::time_point now);

  // Accounting of the exchange.
  void CountRejected(const std::string& reason, const std::string& detail);
  void CountPushed(const v1::FrameHeader& header);
  void CountDelivered(const v1::FrameHeader& header, Clock::duration push_to_pull);

  v1::FederationState Snapshot(const Mailbox::Stats& mailbox, Clock::time_point now) const;

  // Serving (docs/distillation.md): the generation under way and the signed keys of the first and
  // the last stage of pipeline 0; FAILED_PRECONDITION until the federation has started.
  struct ServingEnds {
    uint32_t generation = 0;
    v1::SignedKey first, last;
  };
  absl::StatusOr<ServingEnds> Ends() const;
  // Sends `message` to every attached student site of pipeline 0.
  void SendToStages(const v1::GatewayMessage& message);

 private:
  struct Site {
    v1::SiteInfo info;
    std::optional<v1::SignedKey> key;
    std::shared_ptr<SiteChannel> channel;  // Current stream, if attached.
    Clock::time_point last_seen{};
    v1::SiteReport last_report;
    uint64_t joins = 0;
    uint64_t total_steps = 0;  // As its last join said (0: not said).
  };
  struct Link {
    uint64_t frames = 0, raw_bytes = 0, wire_bytes = 0, delivered = 0;
    double latency_ms_sum = 0;
  };
  struct Action {                          // Deferred until the lock is released, in order.
    std::shared_ptr<SiteChannel> channel;  // Null for a `call`.
    std::optional<v1::GatewayMessage> message;
    absl::Status close;
    std::function<void()> call;
  };

  // A join's claims against the job spec (layers, device, the agreed job text, the key's owner).
  absl::Status CheckJoinRequest(const std::string& site_id, int index,
                                const v1::JoinRequest& request) const;
  // The run under way fixes its length: a join with another --steps is refused.
  absl::Status CheckRunLengthLocked(const Site& joining, const v1::JoinRequest& request) const;
  void AlertLocked(v1::Alert::Severity severity, std::string message);
  void MarkDownLocked(int site, const std::string& why, std::vector<Action>& actions);
  // Sends Rollback to every site when a (re)start is pending and every site is attached.
  void MaybeStartLocked(std::vector<Action>& actions);
  static void Run(std::vector<Action>& actions);
  Link& LinkLocked(const v1::TensorKey& key);

  const JobSpec& spec_;
  const std::string agreed_job_;  // AgreedJobText(spec_): what a joining site must send.
  const Clock::time_point started_ = Clock::now();
  mutable std::mutex mu_;
  std::vector<Site> sites_;
  // (teacher's link, replica, boundary, direction): a teacher's links apart from the pipeline's.
  std::map<std::tuple<bool, uint32_t, uint32_t, int>, Link> links_;
  std::map<std::string, uint64_t> rejected_;
  std::deque<v1::Alert> alerts_;
  const std::function<void(uint32_t)> new_generation_;
  const std::function<void(int, const std::string&)> site_down_;
  uint32_t generation_ = 0;
  bool start_pending_ = true;  // No Rollback sent since the start or the last site failure.
  uint64_t start_step_ = 0;    // Step of the last Rollback.
  std::optional<Clock::time_point> rejoined_at_;  // When a failed site came back (for the alert).
  std::string rejoined_site_;
};

}  // namespace strait::gateway
