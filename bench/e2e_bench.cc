// `strait bench e2e`: federated training end to end, side by side in one run.
//
// Without --wan, each round trains the same job spec (rewritten to --steps, codecs from the command
// line) twice, one after the other on this machine: `strait train` with one compute thread, then a
// real federation on loopback (gateway, one strait-site per site, mutual TLS, sealed links), every
// site with one compute thread. Prints samples/s of both and their ratio, the bytes on the wire per
// step against raw fp32, and how each site spent its training time (compute, wait, codec, crypto).
//
// With --wan PROFILE, for the lossless chain and a compressed one, the federation runs on plain
// loopback, then with every site behind its own emulated link with no delay and no rate limit
// ("pass-through": the emulators' CPU without the link's physics), then behind links of the
// profile (tools/wan), and each run is set against the lower bound on step time that its measured
// compute and the links allow (plan/step_time_bound.h): achieved/bound says how much of the step
// is overhead that physics does not demand.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/command.h"
#include "bench/e2e_chains.h"
#include "bench/federation_run.h"
#include "core/cpu_time.h"
#include "core/job_spec.h"
#include "harness/job_spec_options.h"
#include "harness/job_spec_rewrite.h"
#include "harness/local_federation.h"
#include "harness/wan/link_profile.h"
#include "plan/step_time_bound.h"

namespace strait::bench {
namespace {

using harness::AddJobSpecOverrideOptions;
using harness::DefaultJobSpec;
using harness::Describe;
using harness::JobSpecOverrides;
using harness::LinkProfile;
using harness::LocalFederation;
using harness::NamedProfile;
using harness::ReadFile;
using harness::RewriteJobSpec;
using harness::RewrittenJobSpec;

struct E2eOptions {
  std::string config;
  harness::JobSpecOverrides overrides = {.steps = 150};  // --steps, codecs, batch, schedule.
  int rounds = 1;
  bool json = false;
  std::string wan;                     // Profile name; empty: federation against strait train.
  std::vector<std::string> site_cpus;  // SITE=CORES: cgroup CPU quotas of the federation's sites.
  std::string chains;                  // "F/B;F/B": train each chain set (e2e_chains.h).
  std::string rate, delay;             // With --chains: a custom link instead of loopback.
};

// --chains, behind --wan's profile or a link of --rate and --delay when given.
int RunChainSets(const E2eOptions& o) {
  ChainsOptions c{
      .config = o.config, .overrides = o.overrides, .chains = o.chains, .site_cpus = o.site_cpus};
  if (!o.wan.empty()) {
    absl::StatusOr<LinkProfile> profile = NamedProfile(o.wan);
    if (!profile.ok()) {
      std::fprintf(stderr, "strait bench e2e: %s\n",
                   std::string(profile.status().message()).c_str());
      return 2;
    }
    c.link = *profile;
  }
  if (!o.rate.empty() || !o.delay.empty()) {
    LinkProfile custom{.name = "custom"};
    absl::StatusOr<double> rate = harness::ParseRate(o.rate.empty() ? "unlimited" : o.rate);
    absl::StatusOr<std::chrono::microseconds> delay =
        harness::ParseDuration(o.delay.empty() ? "0" : o.delay);
    if (!rate.ok() || !delay.ok()) {
      std::fprintf(stderr, "strait bench e2e: --rate %s / --delay %s: %s\n", o.rate.c_str(),
                   o.delay.c_str(),
                   std::string((rate.ok() ? delay.status() : rate.status()).message()).c_str());
      return 2;
    }
    custom.rate_bits_per_second = *rate;
    custom.one_way_delay = *delay;
    c.link = custom;
  }
  return RunChains(c);
}

// The bound for `run` of `spec`, its stages' compute as measured in that run.
plan::StepBound Bound(const JobSpec& spec, const FederationRun& run, int64_t steps,
                      const std::optional<harness::LinkProfile>& wan) {
  const int m = spec.training.microbatches;
  plan::BoundInput in;
  in.schedule = spec.training.schedule;
  in.extra_in_flight = spec.training.extra_in_flight;
  in.update = spec.training.update;
  in.microbatches = m;
  in.clip = spec.training.grad_clip > 0;
  for (const SiteFigures& site : run.sites) {
    const double per_microbatch = 1.0 / (static_cast<double>(steps) * m);
    in.stages.push_back(
        {.forward_s = site.time.value("forward_s", 0.0) * per_microbatch,
         .backward_s = site.time.value("backward_s", 0.0) * per_microbatch,
         .update_s = site.time.value("update_s", 0.0) / static_cast<double>(steps)});
    plan::SiteLink link;
    if (wan) {
      link.one_way_delay_s = std::chrono::duration<double>(wan->one_way_delay).count();
      link.bytes_per_second = wan->rate_bits_per_second / 8;
    }
    in.links.push_back(link);
  }
  in.forward_frame_bytes = run.forward_frame_bytes;
  in.backward_frame_bytes = run.backward_frame_bytes;
  return plan::StepTimeLowerBound(in);
}

// `strait train` on one compute thread, or, when every site of `spec` runs on CUDA, on the GPU.
absl::StatusOr<double> RunReference(harness::LocalFederation& fed, const JobSpec& spec) {
  std::vector<std::string> args = {"--threads", "1", "--log-every", "1000000"};
  if (std::all_of(spec.sites.begin(), spec.sites.end(),
                  [](const SiteSpec& s) { return s.device == DeviceKind::kCuda; })) {
    args.insert(args.end(), {"--device", "cuda"});
  }
  if (int code = fed.RunReference(args, kRunLimit); code != 0) {
    return absl::InternalError(absl::StrFormat("strait train exited with %d:\n%s", code,
                                               harness::ReadFile(fed.dir().File("reference.log"))));
  }
  return Metrics(fed.ReferenceDir()).value("samples_per_second", 0.0);
}

void PrintTimeSplit(const std::vector<SiteFigures>& sites) {
  std::printf("%-8s %8s %8s %8s %8s %8s %8s\n", "site", "compute", "wait", "encode", "decode",
              "seal", "open");
  for (const SiteFigures& s : sites) {
    auto f = [&](const char* key) {
      return s.time.value(key, 0.0) / std::max(s.train_seconds, 1e-9);
    };
    std::printf("%-8s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f\n", s.id.c_str(), f("compute_s"),
                f("wait_s"), f("encode_s"), f("decode_s"), f("seal_s"), f("open_s"));
  }
}

// Federation against strait train, --rounds times.
int RunAgainstTrain(const E2eOptions& o, const std::string& yaml, const JobSpec& spec) {
  const TrainingSpec& t = spec.training;
  if (!o.json) {
    std::printf(
        "strait bench e2e: %s, %lld steps of %d samples (%d microbatches, %s), %zu sites, "
        "links %s / %s, one compute thread per process\n",
        spec.name.c_str(), static_cast<long long>(o.overrides.steps), t.global_batch,
        t.microbatches, ToString(t.schedule), spec.sites.size(), spec.links[0].forward.c_str(),
        spec.links[0].backward.c_str());
    std::printf("%-6s %18s %22s %8s\n", "round", "strait train sam/s", "federation samples/s",
                "ratio");
    std::fflush(stdout);
  }
  struct Round {
    double train_sps;
    FederationRun fed;
  };
  std::vector<Round> rounds;
  for (int r = 0; r < o.rounds; ++r) {
    harness::LocalFederation fed(yaml, SiteIds(spec));
    absl::StatusOr<double> train = RunReference(fed, spec);
    absl::StatusOr<FederationRun> run = train.ok() ? RunFederation(fed, spec, {}, o.site_cpus)
                                                   : absl::StatusOr<FederationRun>(train.status());
    if (!run.ok()) {
      std::fprintf(stderr, "strait bench e2e: %s\n", std::string(run.status().message()).c_str());
      return 1;
    }
    if (!o.json) {
      std::printf("%-6d %18.0f %22.0f %7.2fx\n", r + 1, *train, run->samples_per_second,
                  run->samples_per_second / std::max(*train, 1e-9));
      std::fflush(stdout);
    }
    rounds.push_back({*train, *std::move(run)});
  }
  // The round with the best federation figure stands for the run (least disturbed by the machine).
  auto ratio = [](const Round& r) {
    return r.fed.samples_per_second / std::max(r.train_sps, 1e-9);
  };
  const Round& best =
      *std::max_element(rounds.begin(), rounds.end(),
                        [&](const Round& a, const Round& b) { return ratio(a) < ratio(b); });
  const double steps = static_cast<double>(o.overrides.steps);
  const double raw_per_step = best.fed.raw_bytes / steps,
               wire_per_step = best.fed.wire_bytes / steps;
  if (o.json) {
    nlohmann::json out = {{"config", o.config},
                          {"steps", o.overrides.steps},
                          {"forward_codec", spec.links[0].forward},
                          {"backward_codec", spec.links[0].backward},
                          {"train_samples_per_second", best.train_sps},
                          {"federation_samples_per_second", best.fed.samples_per_second},
                          {"ratio", ratio(best)},
                          {"raw_bytes_per_step", raw_per_step},
                          {"wire_bytes_per_step", wire_per_step}};
    for (const SiteFigures& s : best.fed.sites) {
      out["sites"].push_back(
          {{"site", s.id}, {"train_seconds", s.train_seconds}, {"time", s.time}});
    }
    std::printf("%s\n", out.dump(1).c_str());
    return 0;
  }
  std::printf("\nfederation / strait train: %.2fx (best of %zu)\n", ratio(best), rounds.size());
  std::printf(
      "bytes per step across all boundaries: wire %.3f MiB, raw fp32 %.3f MiB (raw/wire %.2fx)\n",
      wire_per_step / (1 << 20), raw_per_step / (1 << 20),
      raw_per_step / std::max(wire_per_step, 1.0));
  std::printf("\nwhere each site's training time went (fractions of its wall time):\n");
  PrintTimeSplit(best.fed.sites);
  return 0;
}

enum class LinkKind { kLoopback, kPassThrough, kProfile };

// Loopback against the WAN profile, for the lossless chain and a compressed one.
int RunWan(const E2eOptions& o) {
  absl::StatusOr<harness::LinkProfile> profile = harness::NamedProfile(o.wan);
  if (!profile.ok()) {
    std::fprintf(stderr, "strait bench e2e: --wan: %s\n",
                 std::string(profile.status().message()).c_str());
    return 2;
  }
  struct Chain {
    std::string name;
    harness::JobSpecOverrides overrides;
  };
  // The compressed chain: the command line's codecs, or int8+zstd forward and bf16 backward.
  Chain lossless{"lossless", o.overrides}, compressed{"compressed", o.overrides};
  lossless.overrides.codec = "none";
  lossless.overrides.forward_codec = lossless.overrides.backward_codec = "";
  if (compressed.overrides.codec.empty() && compressed.overrides.forward_codec.empty() &&
      compressed.overrides.backward_codec.empty()) {
    compressed.overrides.forward_codec = "int8+zstd";
    compressed.overrides.backward_codec = "bf16";
  }
  const int64_t steps = o.overrides.steps;
  const double cores = UsableCores();
  nlohmann::json runs = nlohmann::json::array();
  std::string summary;
  bool header = false;
  for (const Chain& chain : {lossless, compressed}) {
    absl::StatusOr<harness::RewrittenJobSpec> rewritten =
        harness::RewriteJobSpec(o.config, chain.overrides);
    if (!rewritten.ok()) {
      std::fprintf(stderr, "strait bench e2e: %s\n",
                   std::string(rewritten.status().message()).c_str());
      return 2;
    }
    const JobSpec& spec = rewritten->spec;
    const TrainingSpec& t = spec.training;
    if (!o.json && !header) {
      std::printf(
          "strait bench e2e --wan %s: %s; %s, %lld steps of %d samples in %d microbatches, %s, "
          "%zu sites, one compute thread per process\n",
          o.wan.c_str(), Describe(*profile).c_str(), spec.name.c_str(),
          static_cast<long long>(steps), t.global_batch, t.microbatches, ToString(t.schedule),
          spec.sites.size());
      std::printf("%-30s %-12s %9s %9s %9s %9s %9s %-9s %9s %9s %10s %9s %6s  %s\n",
                  "chain (forward/backward)", "link", "samples/s", "step ms", "bound ms", "link ms",
                  "achieved", "bound by", "queued", "achieved", "wire MiB", "cpu ms", "cores",
                  "wait");
      std::printf("%-30s %-12s %9s %9s %9s %9s %9s %-9s %9s %9s %10s %9s %6s  %s\n", "", "", "", "",
                  "", "(bytes)", "/bound", "", "links ms", "/queued", "per step", "per step",
                  "busy", "per site");
      header = true;
    }
    // Samples/s on loopback and through pass-through emulators, for the summary lines.
    double loopback_sps = 0, passthrough_sps = 0;
    for (LinkKind kind : {LinkKind::kLoopback, LinkKind::kPassThrough, LinkKind::kProfile}) {
      std::optional<harness::LinkProfile> link;
      if (kind == LinkKind::kPassThrough) link = harness::LinkProfile{.name = "pass-through"};
      if (kind == LinkKind::kProfile) link = *profile;
      const std::string link_name = kind == LinkKind::kLoopback ? "loopback" : link->name;
      harness::LocalFederation fed(rewritten->yaml, SiteIds(spec));
      std::map<std::string, harness::LinkProfile> links;
      for (const std::string& id : SiteIds(spec)) {
        if (link) links[id] = *link;
      }
      absl::StatusOr<FederationRun> run = RunFederation(fed, spec, links, o.site_cpus);
      if (!run.ok()) {
        std::fprintf(stderr, "strait bench e2e: %s\n", std::string(run.status().message()).c_str());
        return 1;
      }
      const plan::StepBound bound = Bound(spec, *run, steps, link);
      const double sps = run->steady_samples_per_second;
      const double step_s = t.global_batch / std::max(sps, 1e-9);
      const double cpu_per_step_s = run->CpuSeconds() / static_cast<double>(steps);
      // The share of this machine's cores the federation kept busy: near 1, the step is as short as
      // its CPU work allows here, whatever the links and the schedule.
      const double cores_busy = cpu_per_step_s / (step_s * cores);
      const std::string chain_name =
          absl::StrFormat("%s %s/%s", chain.name, spec.links[0].forward, spec.links[0].backward);
      std::string waits;
      for (const SiteFigures& s : run->sites)
        waits += absl::StrFormat("%s%.2f", waits.empty() ? "" : " ", s.WaitFraction());
      if (!o.json) {
        std::printf(
            "%-30s %-12s %9.0f %9.1f %9.1f %9.1f %8.2fx %-9s %9.1f %8.2fx %10.3f %9.1f %6.2f  %s\n",
            chain_name.c_str(), link_name.c_str(), sps, 1e3 * step_s, 1e3 * bound.step_s,
            1e3 * bound.bandwidth_s, step_s / std::max(bound.step_s, 1e-12),
            bound.limited_by.c_str(), 1e3 * bound.queued_s,
            step_s / std::max(bound.queued_s, 1e-12), run->wire_bytes / steps / (1 << 20),
            1e3 * cpu_per_step_s, cores_busy, waits.c_str());
        std::fflush(stdout);
      }
      nlohmann::json entry = {{"chain", chain.name},
                              {"forward_codec", spec.links[0].forward},
                              {"backward_codec", spec.links[0].backward},
                              {"link", link_name},
                              {"samples_per_second", sps},
                              {"whole_run_samples_per_second", run->samples_per_second},
                              {"step_s", step_s},
                              {"bound",
                               {{"step_s", bound.step_s},
                                {"path_s", bound.path_s},
                                {"path_delay_s", bound.path_delay_s},
                                {"path_transfer_s", bound.path_transfer_s},
                                {"crossings", bound.crossings},
                                {"bandwidth_s", bound.bandwidth_s},
                                {"link_s", bound.link_s},
                                {"limited_by", bound.limited_by},
                                {"queued_s", bound.queued_s},
                                {"queued_wait_s", bound.queued_wait_s}}},
                              {"achieved_over_bound", step_s / std::max(bound.step_s, 1e-12)},
                              {"achieved_over_queued", step_s / std::max(bound.queued_s, 1e-12)},
                              {"raw_bytes_per_step", run->raw_bytes / steps},
                              {"wire_bytes_per_step", run->wire_bytes / steps},
                              {"cpu_s_per_step", cpu_per_step_s},
                              {"gateway_cpu_s", run->gateway_cpu_seconds},
                              {"emulator_cpu_s", run->emulator_cpu_seconds},
                              {"cores_busy", cores_busy}};
      for (const SiteFigures& s : run->sites) {
        entry["sites"].push_back({{"site", s.id},
                                  {"train_seconds", s.train_seconds},
                                  {"train_cpu_seconds", s.train_cpu_seconds},
                                  {"wait_fraction", s.WaitFraction()},
                                  {"time", s.time}});
      }
      runs.push_back(entry);
      if (kind == LinkKind::kLoopback) loopback_sps = sps;
      if (kind == LinkKind::kPassThrough) passthrough_sps = sps;
      if (kind == LinkKind::kProfile) {
        summary +=
            absl::StrFormat("%s: %s %.0f samples/s = %.0f%% of loopback, %.0f%% of pass-through\n",
                            chain.name, o.wan, sps, 100 * sps / std::max(loopback_sps, 1e-9),
                            100 * sps / std::max(passthrough_sps, 1e-9));
      }
    }
  }
  if (o.json) {
    nlohmann::json out = {
        {"config", o.config},
        {"steps", steps},
        {"wan",
         {{"profile", o.wan},
          {"rate_bits_per_second", profile->rate_bits_per_second},
          {"one_way_delay_s", std::chrono::duration<double>(profile->one_way_delay).count()}}},
        {"runs", runs}};
    std::printf("%s\n", out.dump(1).c_str());
    return 0;
  }
  std::printf("\n%s", summary.c_str());
  std::printf(
      "\nsamples/s and step ms: the last stage's, from the end of its first step to the end of its "
      "last (the steady state: no pipeline fill or drain); achieved/bound: that step time over the "
      "lower bound that the run's own compute and the links allow "
      "(docs/notes/wan-step-time-bound.md); link ms: "
      "the busiest link's bytes per step over its rate (part of the bound); wait: fraction of each "
      "site's training time spent waiting for frames; cpu ms: CPU time per step of the sites' "
      "training loops, the gateway and the emulators; cores busy: that over the step time and "
      "the %u cores this process may use (near 1: the step is as short as its CPU work allows "
      "here); pass-through: every site behind an emulator with no delay and no rate limit (the "
      "emulators' CPU, which shares this machine's cores with the sites, without the link).\n",
      static_cast<unsigned>(cores));
  return 0;
}

int RunE2e(E2eOptions o) {
  const bool default_config = o.config.empty();
  if (default_config) o.config = harness::DefaultJobSpec();
  if (!o.chains.empty()) return RunChainSets(o);
  if (!o.rate.empty() || !o.delay.empty()) {
    std::fprintf(stderr, "strait bench e2e: --rate and --delay go with --chains\n");
    return 2;
  }
  if (!o.wan.empty()) return RunWan(o);  // Runs a lossless and a compressed chain itself.
  // The default job spec compresses one of its links to show it in `strait demo`; against
  // `strait train`, its links are lossless unless the command line names codecs.
  if (default_config && o.overrides.codec.empty() && o.overrides.forward_codec.empty() &&
      o.overrides.backward_codec.empty()) {
    o.overrides.codec = "none";
  }
  absl::StatusOr<harness::RewrittenJobSpec> rewritten =
      harness::RewriteJobSpec(o.config, o.overrides);
  if (!rewritten.ok()) {
    std::fprintf(stderr, "strait bench e2e: %s\n",
                 std::string(rewritten.status().message()).c_str());
    return 2;
  }
  return RunAgainstTrain(o, rewritten->yaml, rewritten->spec);
}

}  // namespace

void AddBenchE2eCommand(CLI::App& bench, int* exit_code) {
  auto o = std::make_shared<E2eOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "e2e",
      "Federated samples/s (gateway, sites, codecs, crypto on loopback) beside strait train "
      "on the same job spec, one compute thread per process; with --wan, on loopback beside "
      "emulated WAN links, against the lower bound on step time");
  cmd->add_option("-c,--config", o->config,
                  "Job spec (default: configs/fashion-mlp-3site.yaml of this source tree)")
      ->type_name("FILE");
  harness::AddJobSpecOverrideOptions(*cmd, o->overrides, "Steps per run (default 150)");
  cmd->add_option("--rounds", o->rounds,
                  "Rounds of (strait train, federation); the best ratio counts (without --wan)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--site-cpus", o->site_cpus,
                  "Cap a site's processes at this many CPU cores (a cgroup quota): repeatable, "
                  "e.g. --site-cpus dc-b=0.3")
      ->type_name("SITE=CORES");
  cmd->add_option(
         "--wan", o->wan,
         "Emulated link profile between every site and the gateway (metro, region, continent, "
         "satellite): runs the lossless and a compressed chain (--codec..., default int8+zstd "
         "forward, bf16 backward) on loopback, through pass-through emulators (no delay, no rate "
         "limit) and through the profile")
      ->type_name("PROFILE");
  cmd->add_flag("--json", o->json, "Print JSON instead of a table");
  cmd->add_option("--chains", o->chains,
                  "Train the job once per set of link chains, FORWARD/BACKWARD sets apart by ';' "
                  "(the first the reference), and compare validation loss, bytes and samples/s")
      ->type_name("F/B;F/B");
  cmd->add_option("--rate", o->rate,
                  "With --chains: every site behind a link of this rate per direction (100mbit)");
  cmd->add_option("--delay", o->delay, "With --chains: the link's one-way delay (75ms)");
  cmd->callback([o, exit_code] { *exit_code = RunE2e(*o); });
}

}  // namespace strait::bench
