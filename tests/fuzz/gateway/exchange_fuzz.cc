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
//
// Built twice: exchange_fuzz has three stages; exchange_replicas_fuzz (STRAIT_FUZZ_REPLICAS) one
// stage of three replicas, so that masked vectors (SUM frames) reach the gateway's secure sums:
// their decoding, the lane sums and the sum frames stored for each replica. There, event 5 is a
// well-formed masked vector of the `argument` bytes that follow (offered, then pushed): its lanes
// (1, 2 or 4 values a word) and step come from the argument, so that rounds open, complete, repeat
// and disagree.
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "compression/codec_chain.h"
#include "gateway/exchange/exchange_session.h"

namespace {

#ifdef STRAIT_FUZZ_REPLICAS
constexpr bool kReplicas = true;
#else
constexpr bool kReplicas = false;
#endif

enum Event { kMaskedVector = 5, kRejoin = 6, kStreamEndsOrSilence = 7 };

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
#ifdef STRAIT_FUZZ_REPLICAS
    s->sites.push_back(strait::SiteSpec{.id = "a", .layers = {0, 1}});
    s->replicas = {{"a"}, {"b"}, {"c"}};
#else
    for (int i = 0; i < 3; ++i) {
      s->sites.push_back(strait::SiteSpec{.id = std::string(1, 'a' + i), .layers = {i, i + 1}});
    }
#endif
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
    const strait::LayerRange& layers = Spec().sites[i % Spec().Stages()].layers;
    join.mutable_layers()->set_start(layers.start);
    join.mutable_layers()->set_end(layers.end);
    join.set_device("cpu");
    join.set_workers(1);
    join.mutable_key()->set_site_id(Spec().SiteIdAt(i));
    join.mutable_key()->set_epoch(++epochs[i]);
    join.set_has_checkpoint(step != 0);
    join.set_checkpoint_step(step);
    (void)core.federation().Join(Spec().SiteIdAt(i), join, now);
    NewStream(i);
  }

  void NewStream(int i) {
    if (sessions[i] != nullptr) sessions[i]->Close();
    channels.push_back(std::make_shared<PullAgainChannel>());
    sessions[i] = std::make_unique<strait::gateway::ExchangeSession>(core, Spec().SiteIdAt(i),
                                                                     channels.back());
  }

  void Feed(int i, strait::v1::SiteMessage message) { sessions[i]->Handle(std::move(message)); }

  // A masked vector of site `i` (a SUM frame of its replica, stage 0): an offer, then the push.
  void PushMaskedVector(int i, size_t argument, const uint8_t* bytes, size_t size) {
    using namespace strait;
    if (size < 4) return;
    std::vector<float> words(size / 4);
    std::memcpy(words.data(), bytes, 4 * words.size());
    auto chain = compression::CodecChain::Create("none");
    if (!chain.ok()) return;
    absl::StatusOr<absl::Span<const uint8_t>> body = (*chain)->Encode(words, {words.size()});
    if (!body.ok()) return;
    v1::FrameHeader header;
    v1::TensorKey& key = *header.mutable_key();
    key.set_job("fuzz");
    key.set_step(argument / 3 % 4);
    key.set_microbatch(1u << (argument % 3));
    key.set_direction(v1::FORWARD);
    key.set_purpose(v1::SUM);
    key.set_replica(static_cast<uint32_t>(i));
    key.set_generation(core.Snapshot().view().generation());
    header.set_codec_chain("none");
    header.set_dtype(v1::FLOAT32);
    header.add_shape(static_cast<int64_t>(words.size()));
    header.set_raw_bytes(4 * words.size());
    header.set_wire_bytes(body->size());
    header.set_chunk_count(1);
    const uint64_t transfer = ++transfers;
    v1::SiteMessage offer;
    offer.mutable_offer()->set_transfer_id(transfer);
    *offer.mutable_offer()->mutable_header() = header;
    Feed(i, std::move(offer));
    v1::SiteMessage push;
    push.mutable_push()->set_transfer_id(transfer);
    *push.mutable_push()->mutable_header() = std::move(header);
    push.mutable_push()->mutable_chunk()->set_index(0);
    push.mutable_push()->mutable_chunk()->set_data(
        std::string(reinterpret_cast<const char*>(body->data()), body->size()));
    Feed(i, std::move(push));
  }

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
  uint64_t transfers = 1u << 20;  // Transfer ids of masked vectors (apart from the fuzzer's own).
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
    } else if (kReplicas && event == kMaskedVector) {
      if (argument > size - at) break;
      harness.PushMaskedVector(site, argument, data + at, argument);
      at += argument;
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
