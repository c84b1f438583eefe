// Feeds arbitrary sequences of Exchange messages from three sites into the gateway's session logic
// (the code behind every gRPC stream): it must answer errors, never crash, leak reservations or
// standing credit, exceed its memory budget or break the mailbox's byte accounting. Offers and
// credit (gateway.proto, Hello) are fed like any other message; a grant is a message to the site,
// so it needs no simulation here, and a push funded by neither is refused.
// Membership events are fed too, so that the recovery paths run: a site's stream ends (the others
// are paused), a site joins again with a new epoch and a checkpoint offer (a rollback to a new
// generation follows once every site is attached, and the mailbox purges older generations),
// heartbeats expire. Frames stream through (a pull is served from a push's first chunk); a delivery
// whose frame breaks off pulls again, as the gRPC outbox does.
//
// Input: records of [selector: 1 byte][argument: 2 bytes little-endian][payload]. selector % 3 is
// the site; selector / 3 % 8 is the event: 0-5 its stream carries the SiteMessage in the next
// `argument` bytes; 6 its stream ends and it joins again (argument: the checkpoint step it offers;
// 0 = none) and says Hello on a new stream; 7 its stream ends without a rejoin, or (when argument
// is odd) every site's heartbeat is checked two hours later. The older corpus seeds use selectors
// 0-2 only.
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "gateway/exchange/exchange_session.h"

namespace {

enum Event { kRejoin = 6, kStreamEndsOrSilence = 7 };

// Writes nothing, but pulls again for delivered frames that broke off, as the gRPC outbox does.
class PullAgainChannel : public strait::gateway::SiteChannel {
 public:
  void Send(strait::v1::GatewayMessage) override {}
  void SendFrame(uint64_t, strait::gateway::FramePtr frame,
                 std::function<void()> pull_again) override {
    std::lock_guard<std::mutex> lock(mu_);
    deliveries_.emplace_back(std::move(frame), std::move(pull_again));
  }
  void Close(absl::Status) override {}

  // Pulls again for each delivery whose frame broke off; forgets complete ones.
  void Poll() {
    std::vector<std::function<void()>> again;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = deliveries_.begin(); it != deliveries_.end();) {
        if (it->first->broken()) again.push_back(std::move(it->second));
        it = it->first->broken() || it->first->complete() ? deliveries_.erase(it) : std::next(it);
      }
    }
    for (auto& pull_again : again) pull_again();
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<strait::gateway::FramePtr, std::function<void()>>> deliveries_;
};

const strait::JobSpec& Spec() {
  static const strait::JobSpec* spec = [] {
    auto* s = new strait::JobSpec;
    s->name = "fuzz";
    s->training.microbatches = 4;
    s->gateway.memory_budget = 1 << 16;
    s->gateway.heartbeat_timeout_s = 3600;
    for (int i = 0; i < 3; ++i) {
      s->sites.push_back(strait::SiteSpec{.id = std::string(1, 'a' + i), .layers = {i, i + 1}});
    }
    return s;
  }();
  return *spec;
}

struct Harness {
  explicit Harness(const strait::gateway::GatewayOptions& options) : core(Spec(), options) {
    for (int i = 0; i < 3; ++i) {
      epochs.push_back(0);
      sessions.push_back(nullptr);
      Join(i, 0);
    }
  }

  // Site `i` joins with the next epoch, offering checkpoint `step` (0 = none), on a fresh stream.
  void Join(int i, uint64_t step) {
    using namespace strait;
    if (sessions[i] != nullptr) sessions[i]->Close();
    v1::JoinRequest join;
    join.set_federation("fuzz");
    join.mutable_layers()->set_start(i);
    join.mutable_layers()->set_end(i + 1);
    join.set_device("cpu");
    join.set_workers(1);
    join.mutable_key()->set_site_id(Spec().sites[i].id);
    join.mutable_key()->set_epoch(++epochs[i]);
    join.set_has_checkpoint(step != 0);
    join.set_checkpoint_step(step);
    (void)core.federation().Join(Spec().sites[i].id, join, now);
    NewStream(i);
  }

  void NewStream(int i) {
    if (sessions[i] != nullptr) sessions[i]->Close();
    channels.push_back(std::make_shared<PullAgainChannel>());
    sessions[i] = std::make_unique<strait::gateway::ExchangeSession>(core, Spec().sites[i].id,
                                                                     channels.back());
  }

  void Feed(int i, strait::v1::SiteMessage message) { sessions[i]->Handle(std::move(message)); }

  void Hello(int i) {
    strait::v1::SiteMessage hello;
    hello.mutable_hello()->set_epoch(epochs[i]);
    Feed(i, std::move(hello));
  }

  strait::gateway::GatewayCore core;
  strait::gateway::Federation::Clock::time_point now = strait::gateway::Federation::Clock::now();
  std::vector<uint32_t> epochs;
  std::vector<std::unique_ptr<strait::gateway::ExchangeSession>> sessions;
  std::vector<std::shared_ptr<PullAgainChannel>> channels;  // Of every stream so far.
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  spdlog::set_level(spdlog::level::off);  // Rejections are logged; millions of runs need silence.
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strait;
  gateway::GatewayOptions options;
  // Frames of at most a quarter of the budget, so that standing credit (the rest of the budget, at
  // most) and offers waiting for memory both happen.
  options.max_frame_bytes = 1 << 14;
  options.push_credit_bytes = 1 << 15;
  Harness harness(options);
  size_t at = 0;
  while (at + 3 <= size) {
    const int site = data[at] % 3;
    const int event = data[at] / 3 % 8;
    const size_t argument = data[at + 1] | (size_t{data[at + 2]} << 8);
    at += 3;
    if (event == kRejoin) {
      harness.Join(site, argument);
      harness.Hello(site);
    } else if (event == kStreamEndsOrSilence) {
      if (argument % 2 == 0) {
        harness.NewStream(site);
      } else {
        harness.now += std::chrono::hours(2);
        harness.core.federation().CheckHeartbeats(harness.now);
      }
    } else {
      if (argument > size - at) break;
      v1::SiteMessage message;
      const bool parsed = message.ParseFromArray(data + at, static_cast<int>(argument));
      at += argument;
      if (parsed) harness.Feed(site, std::move(message));
    }
    for (auto& channel : harness.channels) channel->Poll();
    const auto stats = harness.core.mailbox().GetStats();
    if (stats.reserved_bytes > Spec().gateway.memory_budget) std::abort();
    if (stats.accounting_errors > 0) std::abort();  // Also an assert in the mailbox (debug).
  }
  for (auto& session : harness.sessions) session->Close();
  const auto stats = harness.core.mailbox().GetStats();
  // Everything reserved must belong to a stored frame once every stream has closed.
  if (stats.reserved_bytes != stats.stored_bytes || stats.credit_bytes != 0) std::abort();
  if (stats.accounting_errors > 0) std::abort();
  return 0;
}
