// `strait bench replicas`: replicas across sites (issue 31), side by side in one run.
//
// The job spec (a federation with replicas, e.g. configs/fashion-mlp-2x2.yaml) trains three times
// on loopback with the same steps and data: with training.sync every_step (the data-parallel
// reference), with sync outer (DiLoCo: --every inner steps a round, --bits per value, --fragments
// and --delay for streamed rounds; each the file's unless given), and, with --wan PROFILE, outer
// again with every site behind an emulated link of that profile (--no-reference: without
// every_step). For each: the final held-out accuracy (the replicas agree after the last round),
// the job's samples/s (all replicas), and the bytes that crossed the gateway (every frame in and
// out, per sample), with the secure sums' share apart; for outer runs, the bytes of a round against
// the same values as dense fp32, and the share of the rounds' time hidden behind inner steps.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/command.h"
#include "bench/federation_run.h"
#include "harness/job_spec_options.h"
#include "harness/job_spec_rewrite.h"
#include "harness/local_federation.h"
#include "harness/wan/link_profile.h"

namespace strait::bench {
namespace {

struct ReplicasBenchOptions {
  std::string config;
  harness::JobSpecOverrides overrides;
  int every = 0;  // 0: the file's (and so below).
  int bits = 0;
  int fragments = 0;
  int delay = -1;
  std::string wan;            // Profile name; empty: no WAN run.
  bool no_reference = false;  // No every_step run: outer alone (and behind `wan`).
};

struct ReplicasRun {
  double accuracy = 0;            // Replica 0's last stage, after the last step.
  double val_loss = 0;            // The same, a language model's validation loss (nats/token).
  double samples_per_second = 0;  // Every replica's last stage, summed.
  double gateway_bytes = 0;       // Wire bytes into and out of the gateway, every site's.
  double sum_bytes = 0;           // Of them, the secure sums'.
  double samples = 0;             // Trained by all replicas.
  // Outer rounds, every site's summed (site_daemon.cc's metrics.json "outer").
  double outer_sites = 0, rounds = 0, round_s = 0, exposed_s = 0;
  double round_bytes = 0, dense_bytes = 0, steady_bytes = 0, steady_dense_bytes = 0;
};

absl::StatusOr<ReplicasRun> Train(const ReplicasBenchOptions& o, const std::string& sync,
                                  const std::optional<harness::LinkProfile>& wan) {
  harness::JobSpecOverrides overrides = o.overrides;
  overrides.sync = sync;
  if (sync == "outer") {
    overrides.outer_every = o.every;
    overrides.outer_bits = o.bits;
    overrides.outer_fragments = o.fragments;
    overrides.outer_delay = o.delay;
  } else {
    overrides.outer_lr = overrides.outer_momentum = -1;
  }
  absl::StatusOr<harness::RewrittenJobSpec> job = harness::RewriteJobSpec(o.config, overrides);
  if (!job.ok()) return job.status();
  const JobSpec& spec = job->spec;
  std::vector<std::string> ids;
  for (int slot = 0; slot < spec.SiteSlots(); ++slot) ids.push_back(spec.SiteIdAt(slot));
  harness::LocalFederation fed(job->yaml, ids);
  std::string error;
  if (!fed.StartGateway({"--log-level", "warn"}, &error)) {
    return absl::InternalError("the gateway did not start:\n" + error);
  }
  if (wan) {
    if (absl::Status s = fed.EmulateWan(*wan); !s.ok()) return s;
  }
  for (const std::string& id : ids) fed.StartSite(id, {"--threads", "1"});
  for (const std::string& id : ids) {
    if (int code = fed.WaitSite(id, kRunLimit); code != 0) {
      return absl::InternalError(
          absl::StrFormat("site %s exited with %d:\n%s", id, code, fed.SiteLog(id)));
    }
  }
  ReplicasRun run;
  for (int slot = 0; slot < spec.SiteSlots(); ++slot) {
    const nlohmann::json m = Metrics(fed.OutDir(ids[slot]));
    if (m.is_discarded())
      return absl::InternalError("site " + ids[slot] + " wrote no metrics.json");
    if (slot % spec.Stages() == spec.Stages() - 1) {
      run.samples_per_second += m.value("samples_per_second", 0.0);
      run.samples += m.value("steps", 0.0) * spec.training.global_batch;
      if (slot == spec.Stages() - 1) {
        run.accuracy = m.value("test_accuracy", 0.0);
        run.val_loss = m.value("val_loss", 0.0);
      }
    }
    if (m.contains("outer")) {
      const nlohmann::json& r = m["outer"];
      ++run.outer_sites;
      run.rounds += r.value("rounds", 0.0);
      run.round_s += r.value("round_s", 0.0);
      run.exposed_s += r.value("exposed_s", 0.0);
      run.round_bytes += r.value("bytes", 0.0);
      run.dense_bytes += r.value("dense_bytes", 0.0);
      run.steady_bytes += r.value("steady_bytes", 0.0);
      run.steady_dense_bytes += r.value("steady_dense_bytes", 0.0);
    }
    for (const auto& link : m["links"]) {  // In and out of the gateway: every frame twice.
      const double wire = link.value("wire_bytes", 0.0);
      run.gateway_bytes += wire;
      if (link.value("sum", false)) run.sum_bytes += wire;
    }
  }
  return run;
}

struct Row {
  std::string name;
  ReplicasRun run;
};

// Per outer run: bytes a stage replica sends in a steady round and on average, each against the
// same round as dense fp32, and the share of the rounds' time the inner steps hid.
void PrintOuterRounds(const std::vector<Row>& rows) {
  std::printf("\n%-34s %8s %14s %14s %12s %12s %9s\n", "outer rounds", "rounds", "B/round steady",
              "B/round mean", "x fp32 steady", "x fp32 mean", "hidden");
  for (const Row& r : rows) {
    const ReplicasRun& x = r.run;
    if (x.rounds == 0) continue;
    std::printf("%-34s %8.0f %14.0f %14.0f %11.1fx %11.1fx %8.1f%%\n", r.name.c_str(), x.rounds,
                x.steady_bytes / std::max(x.outer_sites, 1.0), x.round_bytes / x.rounds,
                x.steady_dense_bytes / std::max(x.steady_bytes, 1.0),
                x.dense_bytes / std::max(x.round_bytes, 1.0),
                x.round_s > 0 ? 100 * (1 - x.exposed_s / x.round_s) : 0.0);
  }
}

int RunReplicasBench(const ReplicasBenchOptions& o) {
  std::optional<harness::LinkProfile> wan;
  if (!o.wan.empty()) {
    absl::StatusOr<harness::LinkProfile> profile = harness::NamedProfile(o.wan);
    if (!profile.ok()) {
      std::fprintf(stderr, "strait bench replicas: %s\n",
                   std::string(profile.status().message()).c_str());
      return 2;
    }
    wan = *profile;
  }
  std::vector<Row> rows;
  std::string outer = "outer";
  if (o.every > 0) outer += absl::StrFormat(", every %d", o.every);
  if (o.bits > 0) outer += absl::StrFormat(", %d bits", o.bits);
  if (o.fragments > 0) outer += absl::StrFormat(", %d fragments", o.fragments);
  if (o.delay >= 0) outer += absl::StrFormat(", delay %d", o.delay);
  struct Variant {
    std::string name, sync;
    std::optional<harness::LinkProfile> link;
  };
  std::vector<Variant> variants;
  if (!o.no_reference) variants.push_back({"every_step", "every_step", std::nullopt});
  variants.push_back({outer, "outer", std::nullopt});
  if (wan) variants.push_back({outer + ", " + o.wan, "outer", wan});
  for (const auto& [name, sync, link] : variants) {
    std::printf("training %s ...\n", name.c_str());
    std::fflush(stdout);
    absl::StatusOr<ReplicasRun> run = Train(o, sync, link);
    if (!run.ok()) {
      std::fprintf(stderr, "strait bench replicas: %s: %s\n", name.c_str(),
                   std::string(run.status().message()).c_str());
      return 1;
    }
    rows.push_back({name, *run});
  }
  std::printf("\n%-34s %9s %9s %12s %16s %16s\n", "sync", "accuracy", "val loss", "samples/s",
              "gateway B/sample", "sums B/sample");
  for (const Row& r : rows) {
    std::printf("%-34s %8.2f%% %9.4f %12.1f %16.0f %16.0f\n", r.name.c_str(), 100 * r.run.accuracy,
                r.run.val_loss, r.run.samples_per_second, r.run.gateway_bytes / r.run.samples,
                r.run.sum_bytes / r.run.samples);
  }
  PrintOuterRounds(rows);
  const size_t outer_row = o.no_reference ? 0 : 1;
  const ReplicasRun& apart = rows[outer_row].run;
  if (!o.no_reference) {
    const ReplicasRun& every = rows[0].run;
    std::printf(
        "\nouter vs every_step: accuracy %+.2f points, validation loss %+.2f%%; %.1fx fewer "
        "bytes through the gateway per sample (%.1fx fewer in the sums)\n",
        100 * (apart.accuracy - every.accuracy),
        every.val_loss > 0 ? 100 * (apart.val_loss / every.val_loss - 1) : 0.0,
        (every.gateway_bytes / every.samples) / (apart.gateway_bytes / apart.samples),
        (every.sum_bytes / every.samples) / std::max(apart.sum_bytes / apart.samples, 1e-9));
  }
  if (wan) {
    std::printf("outer at %s: %.1f%% of its loopback samples/s\n", o.wan.c_str(),
                100 * rows[outer_row + 1].run.samples_per_second / apart.samples_per_second);
  }
  return 0;
}

}  // namespace

void AddBenchReplicasCommand(CLI::App& bench, int* exit_code) {
  CLI::App* cmd = bench.add_subcommand(
      "replicas",
      "Replicas across sites: sync every_step against outer (DiLoCo) on the same job, held-out "
      "accuracy, samples/s and bytes through the gateway per sample; with --wan, outer behind "
      "an emulated link too");
  auto o = std::make_shared<ReplicasBenchOptions>();
  cmd->add_option("-c,--config", o->config, "Job spec with replicas")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--steps", o->overrides.steps, "Steps to train (default: the job spec's)");
  cmd->add_option("--batch", o->overrides.global_batch, "Global batch per replica");
  cmd->add_option("--microbatches", o->overrides.microbatches, "Microbatches per step");
  cmd->add_option("--extra-in-flight", o->overrides.extra_in_flight,
                  "training.extra_in_flight (microbatches stage 0 keeps in flight beyond 1f1b's)");
  cmd->add_option("--schedule", o->overrides.schedule, "training.schedule (1f1b, gpipe, 2bw)");
  cmd->add_option("--update", o->overrides.update, "training.update with 2bw (deferred, eager)");
  cmd->add_option("--stale-gradients", o->overrides.stale_gradients,
                  "training.stale_gradients with eager 2bw (keep, drop)");
  cmd->add_option("--every", o->every, "Inner steps between outer rounds (default: the file's)");
  cmd->add_option("--bits", o->bits,
                  "Bits per pseudo-gradient value (4, 8, 16, 32; default: the file's)");
  cmd->add_option("--fragments", o->fragments,
                  "Fragments whose rounds are staggered over --every steps (default: the file's)");
  cmd->add_option("--delay", o->delay,
                  "Steps a fragment's round has to land (default: the file's)");
  cmd->add_option("--outer-lr", o->overrides.outer_lr, "training.outer.lr (default: the file's)");
  cmd->add_option("--outer-momentum", o->overrides.outer_momentum,
                  "training.outer.momentum (default: the file's)");
  cmd->add_option("--wan", o->wan, "Also run outer with every site behind this link profile");
  cmd->add_flag("--no-reference", o->no_reference,
                "Skip the every_step reference run (outer alone, and behind --wan)");
  cmd->callback([o, exit_code] { *exit_code = RunReplicasBench(*o); });
}

}  // namespace strait::bench
