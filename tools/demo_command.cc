// `strait demo`: a whole federation on this machine. Certificates in a work directory, the gateway
// and one strait-site process per site on free loopback ports, their progress on one screen, and a
// summary (test accuracy, samples/s, bytes on the wire against raw fp32) at the end.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/job_spec.h"
#include "harness/job_spec_options.h"
#include "harness/local_federation.h"
#include "tools/command.h"
#include "tools/text_sampling.h"

namespace strait::tools {
namespace {

struct DemoOptions {
  std::string config;
  harness::JobSpecOverrides overrides;  // --steps and the codec chains.
  bool no_dashboard = false;
  std::string dashboard = "127.0.0.1:0";
  bool keep = false;
  std::string workdir;  // Empty: a temporary one.
  bool resume = false;
  std::string wan;  // Link profile between each site and the gateway; empty: plain loopback.
  std::vector<std::string> site_cpus;  // SITE=CORES: a CPU quota for that site's processes.
  // After the summary: keep the gateway and its dashboard up until Ctrl-C (when a dashboard is
  // served and a person is at the terminal), or exit at once.
  bool exit_when_done = false;
};

volatile std::sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

// The host a browser reaches the dashboard of `address` (HOST:PORT) at: a wildcard address is
// reached through loopback.
std::string DashboardHost(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host == "0.0.0.0" || host == "[::]") host = "127.0.0.1";
  return host;
}

std::string Mib(double bytes) { return absl::StrFormat("%.1f MiB", bytes / (1 << 20)); }

// One process's log shown on the demo's screen, each line prefixed with its name.
struct Follower {
  std::string name;
  harness::LogFollower log;
  bool
      progress_lines;  // false: its "step ..." lines are left out (the last stage's carry the loss)
};

void Forward(std::vector<Follower>& followers, size_t width) {
  for (Follower& f : followers) {
    for (const std::string& line : f.log.NewLines()) {
      if (!f.progress_lines && absl::StartsWith(line, "step ")) continue;
      std::printf("%-*s | %s\n", static_cast<int>(width), f.name.c_str(), line.c_str());
    }
  }
  std::fflush(stdout);
}

// Reads the sites' metrics.json and prints what the federation achieved.
void PrintSummary(const JobSpec& spec, harness::LocalFederation& fed, double wall_seconds) {
  double raw = 0, wire = 0;
  std::optional<double> accuracy, val_loss, val_bits_per_byte, val_bytes_per_token;
  double samples_per_second = 0;
  int64_t steps = 0;
  std::printf("\nstrait demo: done in %.0f s\n", wall_seconds);
  for (int slot = 0; slot < spec.MemberSlots(); ++slot) {  // The teacher's sites too.
    const std::string& id = spec.MemberIdAt(slot);
    const bool last_stage = slot < spec.SiteSlots() && slot % spec.Stages() == spec.Stages() - 1;
    nlohmann::json m =
        nlohmann::json::parse(harness::ReadFile(fed.OutDir(id) + "/metrics.json"), nullptr,
                              /*allow_exceptions=*/false);
    if (m.is_discarded()) continue;
    if (m.contains("test_accuracy")) accuracy = m["test_accuracy"].get<double>();
    if (m.contains("val_loss")) val_loss = m["val_loss"].get<double>();
    if (m.contains("val_bits_per_byte")) val_bits_per_byte = m["val_bits_per_byte"].get<double>();
    if (m.contains("val_bytes_per_token")) {
      val_bytes_per_token = m["val_bytes_per_token"].get<double>();
    }
    if (last_stage) {  // With replicas, the job's rate is every pipeline's together.
      samples_per_second += m.value("samples_per_second", 0.0);
      steps = m.value("steps", int64_t{0});
    }
    for (const auto& link : m["links"]) {
      if (!link.value("sent", false)) continue;  // Counted once, by the sender.
      const double r = link.value("raw_bytes", 0.0), w = link.value("wire_bytes", 0.0);
      raw += r;
      wire += w;
      const int boundary = link.value("boundary", 0);
      const bool forward = link.value("direction", "") == "forward";
      const std::string what =
          link.value("sum", false) ? absl::StrFormat("stage %d sums", boundary)
          : link.value("teach", false)
              ? (forward ? absl::StrFormat("teacher %d out", boundary) : "teacher's pace")
              : absl::StrFormat("boundary %d %s", boundary, link.value("direction", ""));
      std::printf("  %s -> %-18s raw %10s  wire %10s  (%.2fx)\n", id.c_str(), what.c_str(),
                  Mib(r).c_str(), Mib(w).c_str(), w > 0 ? r / w : 0.0);
    }
  }
  std::printf("  steps %lld, %.0f samples/s (%s, training only)\n", static_cast<long long>(steps),
              samples_per_second,
              spec.Replicas() > 1 ? "every replica's last stage" : "last stage");
  std::printf("  bytes on the wire %s for %s of raw fp32 tensors (%.2fx)\n", Mib(wire).c_str(),
              Mib(raw).c_str(), wire > 0 ? raw / wire : 0.0);
  if (val_loss && val_bits_per_byte) {
    // As DescribeEvaluation words it: bytes per token where a token is not one byte.
    const std::string per_token =
        val_bytes_per_token.value_or(1.0) == 1.0
            ? ""
            : absl::StrFormat(" at %.3f bytes/token", *val_bytes_per_token);
    std::printf(
        "  validation loss %.4f nats/token (%.4f bits/byte%s), next-token accuracy %.2f%%\n",
        *val_loss, *val_bits_per_byte, per_token.c_str(), 100 * accuracy.value_or(0.0));
  } else if (accuracy) {
    std::printf("  test accuracy %.2f%%\n", 100 * *accuracy);
  }
  if (!spec.model.IsLanguageModel()) return;
  // A language model shows what it learned: text sampled from the sites' final checkpoints.
  absl::StatusOr<TextSample> sample = SampleFromCheckpoints(
      spec, fed.dir().File("out"), "", 300, {.temperature = 0.8, .top_k = 40, .seed = 1}, 0);
  if (!sample.ok()) {
    std::printf("  no text sample: %s\n", std::string(sample.status().message()).c_str());
    return;
  }
  std::printf("  a sample of the model's text (strait generate):\n%s\n", sample->text.c_str());
}

int RunDemo(DemoOptions o) {
  if (o.config.empty()) o.config = harness::DefaultJobSpec();
  if (o.config.empty()) {
    std::fprintf(stderr,
                 "strait demo: no default job spec next to this build; pass --config FILE\n");
    return 2;
  }
  const harness::Executables exe = harness::Executables::Find();
  for (const std::string* path : {&exe.gateway, &exe.site}) {
    if (path->empty()) {
      std::fprintf(stderr, "strait demo: strait-gateway or strait-site not found beside %s\n",
                   harness::FindStraitExecutable("strait").c_str());
      return 1;
    }
  }
  absl::StatusOr<harness::RewrittenJobSpec> rewritten =
      harness::RewriteJobSpec(o.config, o.overrides);
  if (!rewritten.ok()) {
    std::fprintf(stderr, "strait demo: %s\n", std::string(rewritten.status().message()).c_str());
    return 2;
  }
  const std::string& yaml = rewritten->yaml;
  const JobSpec* spec = &rewritten->spec;
  std::optional<harness::LinkProfile> wan_profile;
  if (!o.wan.empty()) {
    absl::StatusOr<harness::LinkProfile> profile = harness::NamedProfile(o.wan);
    if (!profile.ok()) {
      std::fprintf(stderr, "strait demo: --wan: %s\n",
                   std::string(profile.status().message()).c_str());
      return 2;
    }
    wan_profile = *profile;
  }

  // Every site, replica by replica, then the teacher's (JobSpec::MemberSlots).
  std::vector<std::string> ids;
  size_t width = std::string("gateway").size();
  for (int slot = 0; slot < spec->MemberSlots(); ++slot) {
    ids.push_back(spec->MemberIdAt(slot));
    width = std::max(width, ids.back().size());
  }
  if (o.resume && o.workdir.empty()) {
    std::fprintf(stderr, "strait demo: --resume needs the --workdir of the run to resume\n");
    return 2;
  }
  std::unique_ptr<harness::LocalFederation> federation =
      o.workdir.empty() ? std::make_unique<harness::LocalFederation>(yaml, ids, exe)
                        : std::make_unique<harness::LocalFederation>(yaml, ids, exe, o.workdir);
  harness::LocalFederation& fed = *federation;
  std::printf("strait demo: %s, %zu sites, work directory %s\n", spec->name.c_str(), ids.size(),
              fed.dir().path().c_str());
  for (int r = 0; r < spec->Replicas(); ++r) {
    if (spec->Replicas() > 1) {
      std::printf("  replica %d: %s\n", r, absl::StrJoin(spec->replicas[r], " -> ").c_str());
    }
    if (r > 0) continue;  // The links, under the first pipeline: every pipeline has the same.
    for (size_t b = 0; b < spec->links.size(); ++b) {
      std::printf("  link %s -> %s: forward %s, backward %s%s\n", ids[b].c_str(),
                  ids[b + 1].c_str(), spec->links[b].forward.c_str(),
                  spec->links[b].backward.c_str(),
                  spec->links[b].encryption ? ", sealed (AES-256-GCM)" : ", NOT encrypted");
    }
  }
  if (spec->Replicas() > 1) {
    std::printf("  stage replicas sync %s through the gateway's secure sums (masked, not sealed)\n",
                spec->training.sync == ReplicaSync::kOuter
                    ? absl::StrFormat("every %d steps (outer, %d-bit pseudo-gradients)",
                                      spec->training.outer.every, spec->training.outer.bits)
                          .c_str()
                    : "every step (gradients)");
  }
  std::signal(SIGINT, OnInterrupt);
  std::signal(SIGTERM, OnInterrupt);

  auto fail = [&](const std::string& who, const std::string& what, const std::string& log_tail) {
    fed.KeepDirectory();
    std::fprintf(stderr,
                 "\nstrait demo: %s %s; the end of its log:\n%s\nstrait demo: logs kept in %s\n",
                 who.c_str(), what.c_str(), log_tail.c_str(), fed.dir().path().c_str());
    return 1;
  };
  std::vector<std::string> gateway_args;
  if (!o.no_dashboard) gateway_args = {"--dashboard", o.dashboard};
  std::string error;
  if (!fed.StartGateway(gateway_args, &error)) return fail("the gateway", "did not start", error);
  if (wan_profile) {
    if (absl::Status s = fed.EmulateWan(*wan_profile); !s.ok()) {
      return fail("the emulated WAN links", "did not start", s.ToString());
    }
    std::printf("strait demo: every site reaches the gateway through its own emulated link (%s)\n",
                Describe(*wan_profile).c_str());
  }
  if (!o.no_dashboard) {
    std::printf("strait demo: dashboard at http://%s:%s/\n", DashboardHost(o.dashboard).c_str(),
                fed.dashboard_port().c_str());
  }
  std::fflush(stdout);

  if (absl::Status s = fed.LimitSiteCpus(o.site_cpus); !s.ok()) {
    std::fprintf(stderr, "strait demo: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  for (const std::string& cap : o.site_cpus) {
    std::printf("strait demo: %s CPU cores (a cgroup quota for that site's processes)\n",
                cap.c_str());
  }
  std::vector<Follower> followers = {{"gateway", harness::LogFollower(fed.GatewayLogFile()), true}};
  // Processes that must end with code 0: every site and every follower rank of a site of
  // several machines (its rank 0 is the site's process, whose log is followed).
  std::vector<std::string> processes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string& id = ids[i];
    const std::vector<std::string> args =
        o.resume ? std::vector<std::string>{"--resume"} : std::vector<std::string>{};
    const bool student = static_cast<int>(i) < spec->SiteSlots();  // Else a teacher site.
    const int machines = student ? spec->sites[i % spec->sites.size()].machines : 1;
    if (machines > 1) {
      fed.StartSiteRanks(id, machines, args);
      std::printf("strait demo: site %s runs as %d ranks on loopback\n", id.c_str(), machines);
      for (int r = 1; r < machines; ++r)
        processes.push_back(harness::LocalFederation::RankName(id, r));
    } else {
      fed.StartSite(id, args);
    }
    processes.push_back(id);
    // The last stage of every replica shows its progress lines.
    followers.push_back({id, harness::LogFollower(fed.SiteLogFile(id)),
                         student && (i + 1) % spec->sites.size() == 0});
  }
  const auto start = std::chrono::steady_clock::now();
  std::set<std::string> finished;
  while (finished.size() < processes.size()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    Forward(followers, width);
    if (g_interrupted) {
      std::printf("\nstrait demo: interrupted; stopping the federation\n");
      return 130;  // The LocalFederation stops every process and removes the work directory.
    }
    if (!fed.gateway().Running()) {
      return fail("the gateway", absl::StrFormat("exited (code %d)", fed.gateway().Wait({})),
                  fed.gateway().LogTail());
    }
    for (const std::string& id : processes) {
      if (finished.count(id) || fed.site(id).Running()) continue;
      const int code = fed.site(id).Wait(std::chrono::seconds(0));
      if (code != 0)
        return fail("site " + id, absl::StrFormat("exited with code %d", code), fed.SiteLog(id));
      finished.insert(id);
    }
  }
  Forward(followers, width);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  PrintSummary(*spec, fed, seconds);
  if (o.keep) {
    fed.KeepDirectory();
    std::printf("strait demo: work directory kept: %s\n", fed.dir().path().c_str());
  }
  // The dashboard is worth a look after the run too (loss curve, link ratios), so a person at a
  // terminal keeps it; scripts and tests (no terminal) get their exit at once.
  if (!o.no_dashboard && !o.exit_when_done && isatty(STDIN_FILENO)) {
    std::printf(
        "strait demo: training is over; the gateway and its dashboard stay up at "
        "http://%s:%s/ until you press Ctrl-C\n",
        DashboardHost(o.dashboard).c_str(), fed.dashboard_port().c_str());
    std::fflush(stdout);
    while (!g_interrupted && fed.gateway().Running()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    std::printf("\nstrait demo: stopping the gateway\n");
  }
  return 0;
}

}  // namespace

void AddDemoCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<DemoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Run a whole federation on this machine: certificates, the gateway and one strait-site per "
      "site on loopback, progress, and a summary (test accuracy, samples/s, wire vs raw bytes)");
  cmd->add_option("-c,--config", o->config,
                  "Job spec (default: configs/fashion-mlp-3site.yaml of this source tree)")
      ->type_name("FILE");
  harness::AddJobSpecOverrideOptions(*cmd, o->overrides,
                                     "Train this many steps instead of the job spec's epochs");
  cmd->add_flag("--no-dashboard", o->no_dashboard, "Serve no dashboard");
  cmd->add_option("--dashboard", o->dashboard, "Dashboard address (port 0 picks a free one)")
      ->capture_default_str()
      ->type_name("HOST:PORT");
  cmd->add_flag("--keep", o->keep, "Keep the work directory (logs, checkpoints, certificates)");
  cmd->add_option("--workdir", o->workdir,
                  "Run in this directory and keep it (certificates made once, checkpoints, logs)")
      ->type_name("DIR");
  cmd->add_flag("--resume", o->resume,
                "Resume the run of --workdir from the newest checkpoint every site holds");
  cmd->add_flag("--exit-when-done", o->exit_when_done,
                "Exit after the summary. Without it, a run with a dashboard started from a "
                "terminal keeps the gateway and dashboard up until Ctrl-C");
  cmd->add_option("--site-cpus", o->site_cpus,
                  "Cap a site's processes at this many CPU cores with a cgroup quota, to stand for "
                  "a slower datacenter (repeatable: --site-cpus dc-b=0.3 --site-cpus dc-c=0.7)")
      ->type_name("SITE=CORES");
  cmd->add_option(
         "--wan", o->wan,
         "Put an emulated WAN link (profile metro, region, continent or satellite) between "
         "every site and the gateway")
      ->type_name("PROFILE");
  cmd->callback([o, exit_code] { *exit_code = RunDemo(*o); });
}

}  // namespace strait::tools
