#include "gateway/exchange/gateway_core.h"

namespace strait::gateway {

GatewayCore::GatewayCore(const JobSpec& spec, GatewayOptions options)
    : GatewayCore(spec, JobView::Initial(spec), options) {}

GatewayCore::GatewayCore(const JobSpec& spec, const JobView& view, GatewayOptions options)
    : spec_(spec),
      options_(options),
      // Credit may use all of the budget but one largest frame: a frame waiting for a reservation
      // then always fits once the stored frames are acknowledged (no deadlock on idle credit).
      mailbox_(spec.gateway.memory_budget,
               spec.gateway.memory_budget > options.max_frame_bytes
                   ? spec.gateway.memory_budget - options.max_frame_bytes
                   : 0),
      federation_(
          spec, view, [this](uint32_t generation) { mailbox_.PurgeGenerationsBelow(generation); },
          [this](int slot, const std::string& why) { sums_.SiteFailed(slot, why); }),
      sums_(spec, mailbox_, federation_),
      serving_(spec, mailbox_, federation_, options_.max_frame_bytes),
      housekeeper_([this] { Housekeeping(); }) {}

GatewayCore::~GatewayCore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  housekeeper_.join();
}

uint64_t GatewayCore::push_credit_bytes() const {
  return options_.push_credit_bytes > 0 ? options_.push_credit_bytes
                                        : options_.max_frame_bytes + (16ull << 20);
}

v1::FederationState GatewayCore::Snapshot() const {
  v1::FederationState state = federation_.Snapshot(mailbox_.GetStats(), Federation::Clock::now());
  if (spec_.Replicas() > 1) *state.mutable_sums() = sums_.Snapshot();
  if (!spec_.serving.clients.empty()) *state.mutable_serving() = serving_.State();
  return state;
}

void GatewayCore::Housekeeping() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, options_.housekeeping_interval, [this] { return stop_; })) {
    lock.unlock();
    const auto now = Federation::Clock::now();
    mailbox_.ExpirePulls(now);
    federation_.CheckHeartbeats(now);
    lock.lock();
  }
}

}  // namespace strait::gateway
