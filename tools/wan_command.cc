// `strait wan`: a userspace TCP link emulator between a site and the gateway (DESIGN.md §10). It
// forwards --listen to --forward through an emulated link (a named profile, or a rate and delay),
// and cuts, stalls and restores the link on signals or on its control socket.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "tools/command.h"
#include "tools/wan/control_server.h"
#include "tools/wan/link_emulator.h"
#include "tools/wan/link_profile.h"

namespace strait::tools {
namespace {

struct WanOptions {
  std::string listen = "127.0.0.1:0";
  std::string forward;
  std::string profile;
  std::string rate;
  std::string delay;
  std::string jitter;
  std::string loss_burst;
  std::string control;
  bool verbose = false;
};

// The link the options ask for, or a message saying what to change.
absl::StatusOr<wan::LinkProfile> ProfileFromOptions(const WanOptions& o) {
  if (!o.profile.empty() && (!o.rate.empty() || !o.delay.empty())) {
    return absl::InvalidArgumentError(
        "give either --profile NAME or --rate R --delay D (a custom link), not both");
  }
  if (o.profile.empty() && o.rate.empty() && o.delay.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "say which link to emulate: --profile NAME (%s) or --rate R --delay D, e.g. --rate 100mbit "
        "--delay 75ms",
        absl::StrJoin(wan::ProfileNames(), ", ")));
  }
  wan::LinkProfile profile;
  if (!o.profile.empty()) {
    absl::StatusOr<wan::LinkProfile> named = wan::NamedProfile(o.profile);
    if (!named.ok()) return named.status();
    profile = *named;
  } else {
    profile.name = "custom";
    // A missing --rate is an unlimited one, a missing --delay none.
    absl::StatusOr<double> rate = wan::ParseRate(o.rate.empty() ? "unlimited" : o.rate);
    if (!rate.ok()) return rate.status();
    absl::StatusOr<std::chrono::microseconds> delay =
        wan::ParseDuration(o.delay.empty() ? "0" : o.delay);
    if (!delay.ok()) return delay.status();
    profile.rate_bits_per_second = *rate;
    profile.one_way_delay = *delay;
  }
  if (!o.jitter.empty()) {
    absl::StatusOr<std::chrono::microseconds> jitter = wan::ParseDuration(o.jitter);
    if (!jitter.ok()) return jitter.status();
    profile.jitter = *jitter;
  }
  if (!o.loss_burst.empty()) {
    absl::StatusOr<wan::LossBurst> burst = wan::ParseLossBurst(o.loss_burst);
    if (!burst.ok()) return burst.status();
    profile.loss_burst = *burst;
  }
  return profile;
}

std::string FinalStats(const wan::LinkEmulator::Stats& s) {
  return absl::StrFormat("strait wan: %d bytes up, %d bytes down, %d connections", s.bytes_up,
                         s.bytes_down, s.connections);
}

int RunWan(const WanOptions& o) {
  if (o.forward.empty()) {
    std::fprintf(stderr,
                 "strait wan: --forward HOST:PORT is required (where the link leads, e.g. "
                 "the gateway's address)\n");
    return 2;
  }
  absl::StatusOr<wan::LinkProfile> profile = ProfileFromOptions(o);
  if (!profile.ok()) {
    std::fprintf(stderr, "strait wan: %s\n", std::string(profile.status().message()).c_str());
    return 2;
  }
  // The signals are taken by sigwait below, on this thread only: block them before the emulator's
  // threads start (they inherit the mask).
  sigset_t signals;
  sigemptyset(&signals);
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) sigaddset(&signals, s);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<wan::LinkEmulator>> link =
      wan::LinkEmulator::Start(o.listen, o.forward, *profile);
  if (!link.ok()) {
    std::fprintf(stderr, "strait wan: %s\n", std::string(link.status().message()).c_str());
    return link.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::unique_ptr<wan::ControlServer> control;
  if (!o.control.empty()) {
    absl::StatusOr<std::unique_ptr<wan::ControlServer>> started =
        wan::ControlServer::Start(o.control, link->get());
    if (!started.ok()) {
      std::fprintf(stderr, "strait wan: control socket: %s\n",
                   std::string(started.status().message()).c_str());
      return started.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    control = std::move(*started);
  }
  std::printf("strait wan: %s -> %s, %s\n", (*link)->address().c_str(), o.forward.c_str(),
              wan::Describe(*profile).c_str());
  if (control) {
    std::printf("strait wan: control on %s (cut, stall, restore, stats)\n",
                control->address().c_str());
  }
  std::fflush(stdout);

  uint64_t reported = 0;  // bytes both ways at the last --verbose line
  while (true) {
    timespec period{10, 0};
    const int signal = sigtimedwait(&signals, nullptr, &period);
    if (signal == SIGINT || signal == SIGTERM) break;
    if (signal == SIGUSR1) {
      (*link)->Cut();
      std::printf("strait wan: link cut (SIGUSR1)\n");
    } else if (signal == SIGUSR2) {
      (*link)->Restore();
      std::printf("strait wan: link restored (SIGUSR2)\n");
    } else if (o.verbose) {  // The period passed (or EINTR).
      const wan::LinkEmulator::Stats s = (*link)->stats();
      if (s.bytes_up + s.bytes_down != reported) {
        reported = s.bytes_up + s.bytes_down;
        std::printf("%s, %llu open, link %s\n", FinalStats(s).c_str(),
                    static_cast<unsigned long long>(s.open_connections), wan::StateName(s.state));
      }
    }
    std::fflush(stdout);
  }
  control.reset();
  const wan::LinkEmulator::Stats s = (*link)->stats();
  link->reset();
  std::printf("%s\n", FinalStats(s).c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace

void AddWanCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<WanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "wan",
      "Emulate a WAN link on this machine: forward --listen to --forward with the rate, delay, "
      "jitter and loss stalls of a link between datacenters. SIGUSR1 cuts the link, SIGUSR2 "
      "restores it; --control takes cut, stall, restore and stats lines");
  cmd->add_option("--listen", o->listen, "Address to listen on (port 0 picks a free one, printed)")
      ->capture_default_str()
      ->type_name("HOST:PORT");
  cmd->add_option("--forward", o->forward, "Where every connection is forwarded (required)")
      ->type_name("HOST:PORT");
  cmd->add_option("--profile", o->profile,
                  "Named link: metro (10 Gbit/s, 1 ms one-way), region (1 Gbit/s, 15 ms), "
                  "continent (100 Mbit/s, 75 ms), satellite (20 Mbit/s, 300 ms)")
      ->type_name("NAME");
  cmd->add_option("--rate", o->rate,
                  "Custom link: rate per direction, e.g. 100mbit, 2.5gbit (default unlimited)")
      ->type_name("RATE");
  cmd->add_option("--delay", o->delay,
                  "Custom link: one-way delay, e.g. 75ms, 1.5s, 300us (default 0)")
      ->type_name("DURATION");
  cmd->add_option("--jitter", o->jitter, "Extra delay, uniform in [0, J]; byte order is kept")
      ->type_name("DURATION");
  cmd->add_option("--loss-burst", o->loss_burst,
                  "Loss as TCP sees it: the link stalls for DURATION at random intervals of mean "
                  "MEAN_INTERVAL, e.g. 10s:200ms")
      ->type_name("MEAN_INTERVAL:DURATION");
  cmd->add_option(
         "--control", o->control,
         "Control socket (a line protocol: cut, stall, restore, stats); keep it on loopback")
      ->type_name("HOST:PORT");
  cmd->add_flag("--verbose", o->verbose, "Print the byte counts every 10 s while traffic flows");
  cmd->callback([o, exit_code] { *exit_code = RunWan(*o); });
}

}  // namespace strait::tools
