// Feeds arbitrary sequences of Exchange messages from three sites into the gateway's session logic
// (the code behind every gRPC stream): it must answer errors, never crash, leak reservations or
// standing credit, or exceed its memory budget. Offers and credit (gateway.proto, Hello) are fed like
// any other message; a grant is a message to the site, so it needs no simulation here.
//
// Input: records of [site selector: 1 byte][length: 2 bytes little-endian][SiteMessage bytes].
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include <spdlog/spdlog.h>

#include "gateway/exchange/exchange_session.h"

namespace {

class NullChannel : public strait::gateway::SiteChannel {
 public:
  void Send(strait::v1::GatewayMessage) override {}
  void SendFrame(uint64_t, strait::gateway::FramePtr) override {}
  void Close(absl::Status) override {}
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
  gateway::GatewayCore core(Spec(), options);
  std::vector<std::unique_ptr<gateway::ExchangeSession>> sessions;
  for (int i = 0; i < 3; ++i) {
    v1::JoinRequest join;
    join.set_federation("fuzz");
    join.mutable_layers()->set_start(i);
    join.mutable_layers()->set_end(i + 1);
    join.set_device("cpu");
    join.set_workers(1);
    join.mutable_key()->set_site_id(Spec().sites[i].id);
    join.mutable_key()->set_epoch(1);
    (void)core.federation().Join(Spec().sites[i].id, join, gateway::Federation::Clock::now());
    sessions.push_back(std::make_unique<gateway::ExchangeSession>(core, Spec().sites[i].id,
                                                                  std::make_shared<NullChannel>()));
  }
  std::vector<bool> paused(3, false);
  size_t at = 0;
  while (at + 3 <= size) {
    const int site = data[at] % 3;
    const size_t length = data[at + 1] | (size_t{data[at + 2]} << 8);
    at += 3;
    if (length > size - at) break;
    v1::SiteMessage message;
    const bool parsed = message.ParseFromArray(data + at, static_cast<int>(length));
    at += length;
    if (!parsed || paused[site]) continue;  // A paused stream is not read (flow control).
    paused[site] = !sessions[site]->Handle(std::move(message), [&paused, site] { paused[site] = false; });
    if (core.mailbox().GetStats().reserved_bytes > Spec().gateway.memory_budget) std::abort();
  }
  for (auto& session : sessions) session->Close();
  const auto stats = core.mailbox().GetStats();
  // Everything reserved must belong to a stored frame once every stream has closed.
  if (stats.reserved_bytes != stats.stored_bytes) std::abort();
  return 0;
}
