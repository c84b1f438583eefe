#include "gateway/exchange/gateway_core.h"

namespace strait::gateway {

GatewayCore::GatewayCore(const JobSpec& spec, GatewayOptions options)
    : spec_(spec),
      options_(options),
      mailbox_(spec.gateway.memory_budget),
      federation_(spec, options.insecure),
      housekeeper_([this] { Housekeeping(); }) {}

GatewayCore::~GatewayCore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  housekeeper_.join();
}

v1::FederationState GatewayCore::Snapshot() const {
  return federation_.Snapshot(mailbox_.GetStats(), Federation::Clock::now());
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
