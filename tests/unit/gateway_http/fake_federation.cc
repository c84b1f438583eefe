#include "tests/unit/gateway_http/fake_federation.h"

#include <chrono>
#include <cmath>
#include <string>

namespace strait::gateway::testing {
namespace {

struct FakeSite {
  const char* id;
  uint32_t start, end;
  const char* device;
  const char* device_name;
  uint32_t workers;
  double compute_share;  // Of each one-second report interval.
};

constexpr FakeSite kSites[] = {
    {"dc-a", 0, 2, "cuda", "NVIDIA H100 80GB HBM3", 4, 0.55},
    {"dc-b", 2, 5, "cpu", "AMD EPYC 9654 (96 cores)", 8, 0.72},
    {"dc-c", 5, 8, "cuda", "NVIDIA A100-SXM4-40GB", 2, 0.63},
};

}  // namespace

v1::FederationState FakeFederationState(double t_s) {
  const uint64_t step = static_cast<uint64_t>(4 * t_s);
  const double s = static_cast<double>(step);
  v1::FederationState state;
  v1::FederationView& view = *state.mutable_view();
  view.set_federation("fashion-demo");
  view.set_num_layers(8);
  view.set_generation(1);
  view.set_common_checkpoint_step(step / 100 * 100);
  view.set_has_common_checkpoint(step >= 100);

  for (size_t i = 0; i < std::size(kSites); ++i) {
    const FakeSite& f = kSites[i];
    v1::SiteInfo& info = *view.add_sites();
    info.set_id(f.id);
    info.mutable_layers()->set_start(f.start);
    info.mutable_layers()->set_end(f.end);
    info.set_device(f.device);
    for (uint32_t w = 0; w < f.workers; ++w) info.add_device_names(f.device_name);
    info.set_workers(f.workers);
    info.set_machines(i == 1 ? 2 : 1);
    info.set_state(v1::SITE_TRAINING);
    info.set_epoch(i == 1 ? 2 : 1);
    info.set_step(step);
    info.set_checkpoint_step(view.common_checkpoint_step());

    v1::SiteMetrics& m = *state.add_sites();
    m.set_site_id(f.id);
    m.set_restarts(i == 1 ? 1 : 0);
    m.set_last_seen_s_ago(0.1 + 0.2 * static_cast<double>(i));
    v1::SiteReport& r = *m.mutable_last_report();
    r.set_step(step);
    const bool last = i + 1 == std::size(kSites);
    r.set_has_loss(last);
    if (last) r.set_loss(0.32 + 2.0 * std::exp(-s / 160.0) + 0.04 * std::sin(s / 3.0));
    if (last) {  // As a finished run's last report carries it.
      r.mutable_evaluation()->set_loss(0.331);
      r.mutable_evaluation()->set_accuracy(0.8821);
    }
    r.set_samples_per_second(512.0 + 48.0 * std::sin(t_s / 4.0 + static_cast<double>(i)));
    const double wobble = 0.05 * std::sin(t_s + static_cast<double>(i));
    r.set_compute_s(f.compute_share + wobble);
    r.set_wait_s(0.9 - f.compute_share - wobble - 0.02 * static_cast<double>(i));
    r.set_encode_s(0.030);
    r.set_decode_s(0.020);
    r.set_seal_s(0.012);
    r.set_open_s(0.010);
    r.set_eta_s(std::max(0.0, 1500.0 - s) / 4.0);
    r.set_rejected_frames(i == 2 ? 1 : 0);
    if (i == 1) {  // dc-b: a site of two machines.
      v1::RankStatus& leader = *r.add_ranks();
      leader.set_rank(0);
      leader.set_state("leader");
      leader.set_peer("10.0.2.1:7600");
      v1::RankStatus& follower = *r.add_ranks();
      follower.set_rank(1);
      follower.set_state("training");
      follower.set_peer("ipv4:10.0.2.2:51544");
    }
  }

  // 4 microbatches per step, 4 steps/s, 256 x 1024 floats per activation; int8+zstd forward, bf16
  // backward.
  for (uint32_t boundary = 0; boundary < 2; ++boundary) {
    for (v1::Direction direction : {v1::FORWARD, v1::BACKWARD}) {
      v1::LinkMetrics& link = *state.add_links();
      link.set_boundary(boundary);
      link.set_direction(direction);
      // Continuous in time (not stepwise) so that sampled byte rates are smooth.
      const double exact_frames = 16.0 * t_s;
      const uint64_t frames = static_cast<uint64_t>(exact_frames);
      const uint64_t raw = static_cast<uint64_t>(exact_frames * 256 * 1024 * 4);
      link.set_frames(frames);
      link.set_raw_bytes(raw);
      link.set_wire_bytes(direction == v1::FORWARD ? raw * 10 / 37 : raw / 2 + frames * 64);
      link.set_mean_push_to_pull_ms(3.5 + 1.5 * boundary + (direction == v1::FORWARD ? 0.0 : 0.8));
      link.set_queue_depth(static_cast<uint32_t>(step % 3));
    }
  }

  state.set_rejected_frames(5);
  (*state.mutable_rejected_by_reason())["unauthorized"] = 2;
  (*state.mutable_rejected_by_reason())["malformed"] = 2;
  (*state.mutable_rejected_by_reason())["site_rejected"] = 1;
  state.set_memory_budget_bytes(uint64_t{512} << 20);
  state.set_stored_bytes(static_cast<uint64_t>((96.0 + 64.0 * std::sin(t_s / 5.0)) * (1 << 20)));
  state.set_waiting_pulls(2);
  state.set_accounting_errors(1);
  state.set_uptime_s(t_s + 42.0);
  const uint64_t now_ms = 1'790'000'000'000 + static_cast<uint64_t>(t_s * 1000);
  state.set_unix_ms(now_ms);
  auto alert = [&](v1::Alert::Severity severity, const std::string& message, uint64_t ago_ms) {
    v1::Alert& a = *state.add_alerts();
    a.set_severity(severity);
    a.set_message(message);
    a.set_unix_ms(now_ms - ago_ms);
  };
  alert(v1::Alert::INFO, "site dc-a joined (epoch 1)", 40'000);
  alert(v1::Alert::WARNING, "site dc-b restarted: rejoined with epoch 2", 30'000);
  alert(v1::Alert::CRITICAL, "dc-c refused a frame on boundary 1 backward: authentication failed",
        12'000);
  return state;
}

std::function<v1::FederationState()> FakeSnapshotSource(double speed) {
  auto start = std::chrono::steady_clock::now();
  return [start, speed] {
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    return FakeFederationState(elapsed.count() * speed);
  };
}

}  // namespace strait::gateway::testing
