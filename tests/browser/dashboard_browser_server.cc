// The browser test's server: a DashboardServer fed by the fake federation (step rising, loss
// falling), on a free loopback port. Prints "PORT <n>" on stdout once it serves, then runs until
// its standard input closes, it gets SIGTERM/SIGINT, or --max-seconds pass.
#include <poll.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>

#include "gateway/http/dashboard_server.h"
#include "real_traffic.h"
#include "tests/unit/gateway_http/fake_federation.h"

namespace {
volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

// The fake federation as two replicas: its three sites are replica 0, and dc-d, dc-e, dc-f run the
// same stages as replica 1 (links of their own, with three times the frames); the gateway has made
// one secure sum per stage and step.
strait::v1::FederationState AsTwoReplicas(strait::v1::FederationState state) {
  const char* kOthers[] = {"dc-d", "dc-e", "dc-f"};
  strait::v1::FederationView& view = *state.mutable_view();
  const int stages = view.sites_size();
  view.set_replicas(2);
  for (int s = 0; s < stages; ++s) {
    view.mutable_sites(s)->set_stage(s);
    strait::v1::SiteInfo other = view.sites(s);
    other.set_id(kOthers[s % 3]);
    other.set_replica(1);
    *view.add_sites() = other;
    strait::v1::SiteMetrics metrics = state.sites(s);
    metrics.set_site_id(kOthers[s % 3]);
    *state.add_sites() = metrics;
  }
  const int links = state.links_size();
  for (int i = 0; i < links; ++i) {
    strait::v1::LinkMetrics other = state.links(i);
    other.set_replica(1);
    other.set_frames(3 * other.frames());
    *state.add_links() = other;
  }
  const uint64_t rounds = view.sites(0).step() * stages;
  strait::v1::ReplicaSumsState& sums = *state.mutable_sums();
  sums.set_rounds(rounds);
  sums.set_bytes_in(rounds * 2 * (1 << 20));
  sums.set_bytes_out(rounds * 2 * (1 << 20));
  sums.set_round_seconds(rounds * 0.012);
  return state;
}

// The fake federation taught by a teacher of two sites (knowledge sharing): the teacher's sites and
// TEACH links, its targets at 64 bytes per token, and the last stage waiting 4% of its time; and
// 12 served requests of 100 tokens in 0.5 s each.
strait::v1::FederationState WithTeacher(strait::v1::FederationState state) {
  const char* kTeachers[] = {"teach-a", "teach-b"};
  strait::v1::FederationView& view = *state.mutable_view();
  const uint64_t frames = view.sites(0).step() * 4;
  for (int t = 0; t < 2; ++t) {
    strait::v1::SiteInfo info = view.sites(0);
    info.set_id(kTeachers[t]);
    info.set_teacher(true);
    info.set_stage(t);
    info.mutable_layers()->set_start(4 * t);
    info.mutable_layers()->set_end(4 * t + 4);
    *view.add_sites() = info;
    strait::v1::SiteMetrics metrics = state.sites(0);
    metrics.set_site_id(kTeachers[t]);
    *state.add_sites() = metrics;
    strait::v1::LinkMetrics& link = *state.add_links();
    link.set_teacher(true);
    link.set_boundary(t);
    link.set_direction(strait::v1::FORWARD);
    link.set_frames(frames);
    // A microbatch of 16 windows of 128 tokens: activations of width 256, or 64 B of targets each.
    link.set_wire_bytes(frames * (t == 0 ? 16 * 128 * 256 * 4 : 16 * 128 * 64));
    link.set_raw_bytes(link.wire_bytes());
    if (t == 1) link.set_targets(frames * 16 * 128);
  }
  strait::v1::SiteReport& last = *state.mutable_sites(2)->mutable_last_report();
  last.set_teacher_wait_s(0.04 * (last.compute_s() + last.wait_s()));
  // It serves too (a federation that serves does not train; the page shows both alike).
  strait::v1::ServingState& served = *state.mutable_serving();
  served.set_requests(12);
  served.set_tokens(1200);
  served.set_seconds(6);
  return state;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Serves the dashboard with a fake federation for the browser test, or (--real) starts a "
      "real strait-gateway with three test sites pushing traffic through it."};
  strait::gateway::DashboardOptions options;
  int max_seconds = 300;
  int interval_ms = 250;
  app.add_option("--token", options.token, "Bearer token to require");
  app.add_option("--interval-ms", interval_ms, "Sample interval")->capture_default_str();
  bool real = false;
  app.add_flag("--real", real, "A real gateway process and real gRPC traffic instead of fake data");
  bool replicas = false;
  app.add_flag("--replicas", replicas, "The fake federation as two replicas of its pipeline");
  bool teacher = false;
  app.add_flag("--teacher", teacher, "The fake federation taught by a teacher of two sites");
  app.add_option("--max-seconds", max_seconds, "Exit after this long in any case")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  options.sample_interval = std::chrono::milliseconds(interval_ms);

  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::unique_ptr<strait::gateway::DashboardServer> fake;
  std::unique_ptr<strait::testing::RealTraffic> traffic;
  if (real) {
    auto started = strait::testing::RealTraffic::Start(STRAIT_BINARY_DIR "/gateway/strait-gateway",
                                                       options.token);
    if (!started.ok()) {
      std::fprintf(stderr, "%s\n", started.status().ToString().c_str());
      return 1;
    }
    traffic = *std::move(started);
    std::printf("PORT %d\n", traffic->http_port());
  } else {
    auto source = strait::gateway::testing::FakeSnapshotSource();
    if (replicas) source = [source] { return AsTwoReplicas(source()); };
    if (teacher) source = [source] { return WithTeacher(source()); };
    auto server = strait::gateway::DashboardServer::Start(options, source);
    if (!server.ok()) {
      std::fprintf(stderr, "%s\n", server.status().ToString().c_str());
      return 1;
    }
    fake = *std::move(server);
    std::printf("PORT %d\n", fake->port());
  }
  std::fflush(stdout);

  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(max_seconds);
  while (!g_stop && std::chrono::steady_clock::now() < deadline) {
    pollfd in{STDIN_FILENO, POLLIN, 0};
    if (poll(&in, 1, 200) > 0) {
      char buf[256];
      if (read(STDIN_FILENO, buf, sizeof(buf)) <= 0) break;  // The test went away.
    }
  }
  return 0;
}
