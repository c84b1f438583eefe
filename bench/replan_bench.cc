// `strait bench replan`: a site slowed in the middle of a run against a fresh plan for the new
// speeds.
//
// A planned federation (`layers: auto`) trains with its sites under CPU quotas (--site-cpus). Once
// the site named by --slow has written its checkpoint of step --slow-at, it is killed, its quota
// lowered, and it is started again (it measures its profile anew under the new quota): the gateway
// plans the split again, the layers that change owner move at the rollback, and training goes on.
// Its samples/s from the rollback to the end are set beside those of a fresh federation that
// starts under the new quotas and trains as many steps; the run's final state beside
// `strait train`'s (byte for byte).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/command.h"
#include "bench/federation_run.h"
#include "compression/chain_spec.h"
#include "harness/cpu_quota.h"
#include "harness/job_spec_options.h"
#include "harness/job_spec_rewrite.h"
#include "harness/local_federation.h"
#include "harness/subprocess.h"
#include "site/nn/checkpoint.h"

namespace strait::bench {
namespace {

struct ReplanBenchOptions {
  std::string config;
  harness::JobSpecOverrides overrides = {.steps = 60, .checkpoint_every = 20};
  std::vector<std::string> site_cpus;  // SITE=CORES before the slow-down.
  std::string slow;                    // SITE=CORES after it.
  int slow_at = 20;
  bool check_bits = true;
};

// Seconds since midnight of a log line ("2026-11-27 10:42:23.013 info ...").
double LogSeconds(const std::string& line) {
  int year, month, day, hour, minute;
  double second;
  if (std::sscanf(line.c_str(), "%d-%d-%d %d:%d:%lf", &year, &month, &day, &hour, &minute,
                  &second) != 6) {
    return -1;
  }
  return hour * 3600.0 + minute * 60.0 + second;
}

// The gateway's log lines that contain `text`.
std::vector<std::string> Lines(const std::string& log, const std::string& text) {
  std::vector<std::string> found;
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (line.find(text) != absl::string_view::npos) found.emplace_back(line);
  }
  return found;
}

// "[0, 2) [2, 5), extra_in_flight 1" of a "plan: planned split ..." line.
std::string SplitOfPlanLine(const std::string& line) {
  const size_t at = line.find("planned split ") + 14;
  return line.substr(at, line.find(':', at) - at);
}

struct Phase {
  double samples_per_second = 0;
  int64_t from_step = 0;
  std::string split;  // The last split the gateway planned.
};

// From the gateway's log: samples/s from the last "training (re)starts at step S" to the last site
// finishing, and the split it planned last.
absl::StatusOr<Phase> LastPhase(const std::string& log, int64_t steps, int global_batch) {
  std::vector<std::string> starts = Lines(log, "training starts at step ");
  for (const std::string& l : Lines(log, "training restarts at step ")) starts.push_back(l);
  const std::vector<std::string> finished = Lines(log, " finished at step ");
  const std::vector<std::string> plans = Lines(log, "plan: planned split ");
  if (starts.empty() || finished.empty() || plans.empty()) {
    return absl::InternalError("the gateway's log lacks its start, plan or finish:\n" + log);
  }
  const std::string& start = starts.back();  // Restarts come after the start.
  Phase phase;
  phase.from_step = std::stoll(start.substr(start.find("at step ") + 8));
  const double seconds = LogSeconds(finished.back()) - LogSeconds(start);
  phase.samples_per_second = (steps - phase.from_step) * global_batch / std::max(seconds, 1e-9);
  phase.split = SplitOfPlanLine(plans.back());

  return phase;
}

void StartSites(harness::LocalFederation& fed, const std::vector<std::string>& ids) {
  for (const std::string& id : ids) fed.StartSite(id, {"--threads", "1", "--no-eval"});
}

absl::Status WaitSites(harness::LocalFederation& fed, const std::vector<std::string>& ids) {
  absl::Status done = fed.WaitSites(ids, kRunLimit);
  if (done.ok()) return done;
  return absl::Status(done.code(), absl::StrCat(done.message(), "\n--- gateway:\n",
                                                harness::ReadFile(fed.GatewayLogFile())));
}

// Whether the sites' final checkpoints, in stage order, are `strait train`'s byte for byte.
absl::StatusOr<bool> SameBitsAsOneMachine(harness::LocalFederation& fed,
                                          const std::vector<std::string>& ids) {
  if (fed.RunReference({"--threads", "1"}, kRunLimit) != 0) {
    return absl::InternalError("strait train failed:\n" +
                               harness::ReadFile(fed.dir().File("reference.log")));
  }
  absl::StatusOr<site::CheckpointState> reference =
      site::ReadCheckpoint(fed.ReferenceDir() + "/final.ckpt");
  if (!reference.ok()) return reference.status();
  std::vector<float> params, state;
  std::vector<site::CheckpointState> finals;
  for (const std::string& id : ids) {
    absl::StatusOr<site::CheckpointState> final =
        site::ReadCheckpoint(fed.OutDir(id) + "/final.ckpt");
    if (!final.ok()) return final.status();
    params.insert(params.end(), final->params.begin(), final->params.end());
    finals.push_back(*std::move(final));
  }
  // AdamW's moments: every stage's m, then every stage's v, as one machine lays them out.
  for (int half = 0; half < 2; ++half) {
    for (const site::CheckpointState& f : finals) {
      const size_t n = f.params.size();
      state.insert(state.end(), f.optimizer_state.begin() + half * n,
                   f.optimizer_state.begin() + (half + 1) * n);
    }
  }
  return params.size() == reference->params.size() &&
         state.size() == reference->optimizer_state.size() &&
         std::memcmp(params.data(), reference->params.data(), 4 * params.size()) == 0 &&
         std::memcmp(state.data(), reference->optimizer_state.data(), 4 * state.size()) == 0;
}

int Fail(const absl::Status& s, int code = 1) {
  std::fprintf(stderr, "strait bench replan: %s\n", std::string(s.message()).c_str());
  return code;
}

int RunReplanBench(const ReplanBenchOptions& o) {
  const std::string config =
      o.config.empty() ? harness::DefaultJobSpec("fashion-mlp-3site-auto.yaml") : o.config;
  absl::StatusOr<harness::RewrittenJobSpec> job = harness::RewriteJobSpec(config, o.overrides);
  if (!job.ok()) return Fail(job.status(), 2);
  const JobSpec& spec = job->spec;
  if (!spec.PlansSplit()) {
    return Fail(absl::InvalidArgumentError(config + " plans no split: give its sites layers: auto"),
                2);
  }
  const std::vector<std::string> ids = SiteIds(spec);
  const std::vector<std::string> slow = absl::StrSplit(o.slow, '=');
  absl::StatusOr<std::map<std::string, double>> after = harness::ParseSiteCpus({o.slow}, ids);
  if (!after.ok() || slow.size() != 2) {
    return Fail(absl::InvalidArgumentError("--slow takes SITE=CORES of a site of the job"), 2);
  }
  std::vector<std::string> after_cpus;
  for (const std::string& cap : o.site_cpus) {
    if (cap.rfind(slow[0] + "=", 0) != 0) after_cpus.push_back(cap);
  }
  after_cpus.push_back(o.slow);
  const int64_t steps = spec.training.steps;
  const int batch = spec.training.global_batch;

  // The run that slows down.
  std::fprintf(stderr, "run 1: %s, then %s from step %d\n", absl::StrJoin(o.site_cpus, " ").c_str(),
               o.slow.c_str(), o.slow_at);
  harness::LocalFederation slowed(job->yaml, ids);
  if (absl::Status s = slowed.LimitSiteCpus(o.site_cpus); !s.ok()) return Fail(s, 2);
  std::string error;
  if (!slowed.StartGateway({}, &error)) return Fail(absl::InternalError(error));
  StartSites(slowed, ids);
  const std::string checkpoint =
      slowed.dir().File(absl::StrFormat("checkpoints/%s/step-%08d.ckpt", slow[0], o.slow_at));
  const auto deadline = std::chrono::steady_clock::now() + kRunLimit;
  while (!std::filesystem::exists(checkpoint) && slowed.site(slow[0]).Running() &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!std::filesystem::exists(checkpoint)) {
    return Fail(absl::InternalError(absl::StrCat(slow[0], " wrote no checkpoint of step ",
                                                 o.slow_at, ":\n", slowed.SiteLog(slow[0]))));
  }
  const std::string before_log = harness::ReadFile(slowed.GatewayLogFile());
  slowed.site(slow[0]).Kill(SIGKILL);
  slowed.site(slow[0]).Wait(std::chrono::seconds(10));
  if (absl::Status s = slowed.LimitSiteCpus(slow[0], after->at(slow[0])); !s.ok()) return Fail(s);
  slowed.StartSite(slow[0], {"--threads", "1", "--no-eval", "--resume"});
  if (absl::Status s = WaitSites(slowed, ids); !s.ok()) return Fail(s);
  const std::string slowed_log = harness::ReadFile(slowed.GatewayLogFile());
  absl::StatusOr<Phase> replanned = LastPhase(slowed_log, steps, batch);
  if (!replanned.ok()) return Fail(replanned.status());
  const std::vector<std::string> first_plan = Lines(before_log, "plan: planned split ");

  // A fresh federation under the new quotas, as many steps as the first trained after its
  // rollback.
  std::fprintf(stderr, "run 2: %s from the start\n", absl::StrJoin(after_cpus, " ").c_str());
  harness::JobSpecOverrides fresh_overrides = o.overrides;
  fresh_overrides.steps = steps - replanned->from_step;
  absl::StatusOr<harness::RewrittenJobSpec> fresh_job =
      harness::RewriteJobSpec(config, fresh_overrides);
  if (!fresh_job.ok()) return Fail(fresh_job.status());
  harness::LocalFederation fresh(fresh_job->yaml, ids);
  if (absl::Status s = fresh.LimitSiteCpus(after_cpus); !s.ok()) return Fail(s, 2);
  if (!fresh.StartGateway({}, &error)) return Fail(absl::InternalError(error));
  StartSites(fresh, ids);
  if (absl::Status s = WaitSites(fresh, ids); !s.ok()) return Fail(s);
  absl::StatusOr<Phase> planned =
      LastPhase(harness::ReadFile(fresh.GatewayLogFile()), fresh_overrides.steps, batch);
  if (!planned.ok()) return Fail(planned.status());

  const std::string first_split = first_plan.empty() ? "?" : SplitOfPlanLine(first_plan.back());
  std::printf("split planned first:            %s\n", first_split.c_str());
  std::printf("re-planned after the slow-down: %s (%s)\n", replanned->split.c_str(),
              Lines(slowed_log, "planning it again").empty() ? "no re-plan"
              : replanned->split == first_split              ? "the same split: nothing moved"
                                                             : "layers moved");
  std::printf("fresh plan for the new speeds:  %s\n", planned->split.c_str());
  std::printf("samples/s from the rollback at step %lld to step %lld: %.0f\n",
              static_cast<long long>(replanned->from_step), static_cast<long long>(steps),
              replanned->samples_per_second);
  std::printf("samples/s of the fresh plan over as many steps:  %.0f\n",
              planned->samples_per_second);
  std::printf("re-planned / fresh: %.1f%%\n",
              100 * replanned->samples_per_second / planned->samples_per_second);
  const bool lossless = std::all_of(spec.links.begin(), spec.links.end(), [](const LinkSpec& l) {
    absl::StatusOr<compression::ChainSpec> f = compression::ParseChainSpec(l.forward);
    absl::StatusOr<compression::ChainSpec> b = compression::ParseChainSpec(l.backward);
    return f.ok() && b.ok() && f->IsLossless() && b->IsLossless();
  });
  if (o.check_bits && !lossless) {
    std::printf("final state of run 1 vs strait train: not compared (lossy links; --codec none)\n");
  } else if (o.check_bits) {
    absl::StatusOr<bool> same = SameBitsAsOneMachine(slowed, ids);
    if (!same.ok()) return Fail(same.status());
    std::printf("final state of run 1 vs strait train: %s\n",
                *same ? "bit-identical" : "DIFFERENT");
    if (!*same) return 1;
  }
  return 0;
}

}  // namespace

void AddBenchReplanCommand(CLI::App& bench, int* exit_code) {
  auto o = std::make_shared<ReplanBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "replan",
      "A site slowed mid-run (its CPU quota lowered, the site restarted) makes the gateway plan "
      "the split again and move layers: its samples/s beside a fresh plan for the new speeds, and "
      "its final state beside strait train's");
  cmd->add_option("-c,--config", o->config,
                  "Job spec with layers: auto (default: configs/fashion-mlp-3site-auto.yaml of "
                  "this source tree)")
      ->type_name("FILE");
  harness::AddJobSpecOverrideOptions(*cmd, o->overrides, "Steps of the first run (default 60)");
  cmd->add_option("--checkpoint-every", o->overrides.checkpoint_every,
                  "training.checkpoint.every of both runs")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--site-cpus", o->site_cpus,
                  "A site's CPU cores before the slow-down: repeatable, e.g. --site-cpus dc-b=0.7")
      ->type_name("SITE=CORES");
  cmd->add_option("--slow", o->slow, "The site slowed and its cores after, e.g. dc-b=0.25")
      ->type_name("SITE=CORES")
      ->required();
  cmd->add_option("--slow-at", o->slow_at,
                  "The site is slowed once it has written its checkpoint of this step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("!--no-bits", o->check_bits, "Skip the comparison with strait train's final state");
  cmd->callback([o, exit_code] { *exit_code = RunReplanBench(*o); });
}

}  // namespace strait::bench
