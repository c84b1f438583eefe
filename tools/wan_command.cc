// `strait wan`: a userspace TCP link emulator between a site and the gateway (DESIGN.md §10). It
// forwards --listen to --forward through an emulated link (a named profile, or a rate and delay),
// and cuts, stalls and restores the link on signals or on its control socket.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "harness/wan/control_server.h"
#include "harness/wan/link_emulator.h"
#include "harness/wan/link_profile.h"
#include "tools/command.h"

namespace strait::tools {
namespace {

// Written by OnSignal (the signal number as one byte), read by RunWan's loop.
int g_signal_pipe[2] = {-1, -1};
void OnSignal(int signal) {
  const unsigned char byte = static_cast<unsigned char>(signal);
  [[maybe_unused]] ssize_t ignored = write(g_signal_pipe[1], &byte, 1);
}

struct WanOptions {
  std::string listen = "127.0.0.1:0";
  std::string forward;
  std::string profile;
  std::string rate;
  std::string delay;
  std::string jitter;
  std::string loss_burst;
  std::string control;
  std::string dial_timeout = "10s";
  bool verbose = false;
};

// The link the options ask for, or a message saying what to change.
absl::StatusOr<harness::LinkProfile> ProfileFromOptions(const WanOptions& o) {
  if (!o.profile.empty() && (!o.rate.empty() || !o.delay.empty())) {
    return absl::InvalidArgumentError(
        "give either --profile NAME or --rate R --delay D (a custom link), not both");
  }
  if (o.profile.empty() && o.rate.empty() && o.delay.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "say which link to emulate: --profile NAME (%s) or --rate R --delay D, e.g. --rate 100mbit "
        "--delay 75ms",
        absl::StrJoin(harness::ProfileNames(), ", ")));
  }
  harness::LinkProfile profile;
  if (!o.profile.empty()) {
    absl::StatusOr<harness::LinkProfile> named = harness::NamedProfile(o.profile);
    if (!named.ok()) return named.status();
    profile = *named;
  } else {
    profile.name = "custom";
    // A missing --rate is an unlimited one, a missing --delay none.
    absl::StatusOr<double> rate = harness::ParseRate(o.rate.empty() ? "unlimited" : o.rate);
    if (!rate.ok()) return rate.status();
    absl::StatusOr<std::chrono::microseconds> delay =
        harness::ParseDuration(o.delay.empty() ? "0" : o.delay);
    if (!delay.ok()) return delay.status();
    profile.rate_bits_per_second = *rate;
    profile.one_way_delay = *delay;
  }
  if (!o.jitter.empty()) {
    absl::StatusOr<std::chrono::microseconds> jitter = harness::ParseDuration(o.jitter);
    if (!jitter.ok()) return jitter.status();
    profile.jitter = *jitter;
  }
  if (!o.loss_burst.empty()) {
    absl::StatusOr<harness::LossBurst> burst = harness::ParseLossBurst(o.loss_burst);
    if (!burst.ok()) return burst.status();
    profile.loss_burst = *burst;
  }
  return profile;
}

std::string FinalStats(const harness::LinkEmulator::Stats& s) {
  return absl::StrFormat(
      "strait wan: %d bytes up, %d bytes down, %d connections%s", s.bytes_up, s.bytes_down,
      s.connections,
      s.failed_dials == 0 ? "" : absl::StrFormat(", %d could not reach --forward", s.failed_dials));
}

int RunWan(const WanOptions& o) {
  if (o.forward.empty()) {
    std::fprintf(stderr,
                 "strait wan: --forward HOST:PORT is required (where the link leads, e.g. "
                 "the gateway's address)\n");
    return 2;
  }
  absl::StatusOr<harness::LinkProfile> profile = ProfileFromOptions(o);
  if (!profile.ok()) {
    std::fprintf(stderr, "strait wan: %s\n", std::string(profile.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::chrono::microseconds> dial_timeout = harness::ParseDuration(o.dial_timeout);
  if (!dial_timeout.ok() || dial_timeout->count() <= 0) {
    std::fprintf(stderr, "strait wan: --dial-timeout %s: %s\n", o.dial_timeout.c_str(),
                 dial_timeout.ok() ? "must be positive, e.g. 10s"
                                   : std::string(dial_timeout.status().message()).c_str());
    return 2;
  }
  // Signals may land on any thread (libraries linked into `strait` start threads of their own
  // before main), so a handler passes them to the loop below through a pipe.
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::fprintf(stderr, "strait wan: cannot make a pipe for signals\n");
    return 1;
  }
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) sigaction(s, &action, nullptr);

  absl::StatusOr<std::unique_ptr<harness::LinkEmulator>> link = harness::LinkEmulator::Start(
      o.listen, o.forward, *profile, std::chrono::ceil<std::chrono::milliseconds>(*dial_timeout));
  if (!link.ok()) {
    std::fprintf(stderr, "strait wan: %s\n", std::string(link.status().message()).c_str());
    return link.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::unique_ptr<harness::ControlServer> control;
  if (!o.control.empty()) {
    absl::StatusOr<std::unique_ptr<harness::ControlServer>> started =
        harness::ControlServer::Start(o.control, link->get());
    if (!started.ok()) {
      std::fprintf(stderr, "strait wan: control socket: %s\n",
                   std::string(started.status().message()).c_str());
      return started.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    control = std::move(*started);
  }
  std::printf("strait wan: %s -> %s, %s\n", (*link)->address().c_str(), o.forward.c_str(),
              Describe(*profile).c_str());
  if (control) {
    std::printf("strait wan: control on %s (cut, stall, restore, stats)\n",
                control->address().c_str());
  }
  std::fflush(stdout);

  uint64_t reported = 0;      // bytes both ways at the last --verbose line
  uint64_t failed_dials = 0;  // at the last warning
  while (true) {
    pollfd ready{g_signal_pipe[0], POLLIN, 0};
    unsigned char signal = 0;
    if (poll(&ready, 1, 10'000) == 1 && read(g_signal_pipe[0], &signal, 1) != 1) signal = 0;
    if (signal == SIGINT || signal == SIGTERM) break;
    if (signal == SIGUSR1) {
      (*link)->Cut();
      std::printf("strait wan: link cut (SIGUSR1)\n");
    } else if (signal == SIGUSR2) {
      (*link)->Restore();
      std::printf("strait wan: link restored (SIGUSR2)\n");
    }
    if (const uint64_t failed = (*link)->stats().failed_dials; failed != failed_dials) {
      std::fprintf(stderr,
                   "strait wan: %llu connection(s) could not reach %s (refused, or no answer "
                   "within --dial-timeout %s): is it up and reachable from here?\n",
                   static_cast<unsigned long long>(failed - failed_dials), o.forward.c_str(),
                   o.dial_timeout.c_str());
      failed_dials = failed;
    }
    if (signal == 0 && o.verbose) {  // Ten seconds passed.
      const harness::LinkEmulator::Stats s = (*link)->stats();
      if (s.bytes_up + s.bytes_down != reported) {
        reported = s.bytes_up + s.bytes_down;
        std::printf("%s, %llu open, link %s\n", FinalStats(s).c_str(),
                    static_cast<unsigned long long>(s.open_connections),
                    harness::StateName(s.state));
      }
    }
    std::fflush(stdout);
  }
  control.reset();
  const harness::LinkEmulator::Stats s = (*link)->stats();
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
  cmd->add_option("--dial-timeout", o->dial_timeout,
                  "How long a connection may wait for --forward to answer before it is closed "
                  "(counted as could not reach)")
      ->capture_default_str()
      ->type_name("DURATION");
  cmd->add_flag("--verbose", o->verbose, "Print the byte counts every 10 s while traffic flows");
  cmd->callback([o, exit_code] { *exit_code = RunWan(*o); });
}

}  // namespace strait::tools
