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
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Serves the dashboard with a fake federation for the browser test, or (--real) starts a "
      "real strait-gateway with three test sites pushing traffic through it."};
  strait::gateway::DashboardOptions options;
  bool insecure = false;
  int max_seconds = 300;
  int interval_ms = 250;
  app.add_option("--token", options.token, "Bearer token to require");
  app.add_flag("--insecure", insecure, "Report plaintext gRPC (the dashboard's banner)");
  app.add_option("--interval-ms", interval_ms, "Sample interval")->capture_default_str();
  bool real = false;
  app.add_flag("--real", real, "A real gateway process and real gRPC traffic instead of fake data");
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
    auto server = strait::gateway::DashboardServer::Start(
        options, strait::gateway::testing::FakeSnapshotSource(insecure));
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
