// `strait bench plan`: the split planner's choice against every other contiguous split, measured.
//
// Sites stand for datacenters of different speeds on this one machine: each under its CPU quota
// (--site-cpus, tools/cpu_quota.h) and, with --link, behind an emulated WAN link (tools/wan). The
// benchmark first profiles every site as the planner would see it (`strait profile` in the site's
// quota), plans the split (plan/split_planner.h), then trains the job once per split, one after
// the other in one sitting: the planned one, the even one and every other contiguous split (or,
// when there are more than --max-runs, the best by prediction and a seeded sample of the rest).
// Each row sets the measured steady-state samples/s beside the prediction.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/command.h"
#include "bench/federation_run.h"
#include "harness/cpu_quota.h"
#include "harness/job_spec_options.h"
#include "harness/job_spec_rewrite.h"
#include "harness/local_federation.h"
#include "harness/plan_profiles.h"
#include "harness/subprocess.h"
#include "plan/site_profile.h"
#include "plan/split_planner.h"
#include "site/plan/site_profiler.h"

namespace strait::bench {
namespace {

struct PlanBenchOptions {
  std::string config;
  harness::JobSpecOverrides overrides = {.steps = 40};
  std::vector<std::string> site_cpus;  // SITE=CORES
  std::vector<std::string> links;      // SITE=PROFILE or SITE=RATE:DELAY
  int max_runs = 12;
  bool plan_in_flight = false;  // Each split with the extra_in_flight the planner chooses for it.
  bool json = false;
};

// Every site's profile, each measured as it will run: under its quota, or in this process.
absl::StatusOr<plan::FederationProfile> ProfileSites(const std::string& config, const JobSpec& spec,
                                                     const std::map<std::string, double>& quotas) {
  plan::FederationProfile profiles;
  const site::SiteProfilerOptions options{.threads = 1};
  for (size_t s = 0; s < spec.sites.size(); ++s) {
    const std::string& id = spec.sites[s].id;
    std::fprintf(stderr, "profiling %s ...\n", id.c_str());
    absl::StatusOr<plan::SiteProfile> p =
        quotas.count(id) ? harness::ProfileUnderQuota(config, id, quotas.at(id), options)
                         : site::MeasureSiteProfile(spec, static_cast<int>(s), options);
    if (!p.ok()) return p.status();
    profiles.sites.push_back(*std::move(p));
  }
  return profiles;
}

// The emulated link of each site that has one, as `strait wan` models it.
std::map<std::string, harness::LinkProfile> EmulatedLinks(const plan::FederationProfile& profiles) {
  std::map<std::string, harness::LinkProfile> links;
  for (const plan::MeasuredLink& l : profiles.links) {
    links[l.site] = {
        .name = "custom",
        .rate_bits_per_second = 8 * l.bytes_per_second,
        .one_way_delay = std::chrono::microseconds(std::llround(l.round_trip_s * 5e5))};
  }
  return links;
}

// Which splits to run: all of them when they are at most `max_runs`; otherwise the planned and
// the even split, the best by prediction up to half of `max_runs`, and a seeded sample of the rest.
std::vector<plan::SplitPrediction> Chosen(std::vector<plan::SplitPrediction> all,
                                          const plan::SplitChoice& planned,
                                          const plan::SplitChoice& even, int max_runs) {
  if (static_cast<int>(all.size()) <= max_runs) return all;
  std::sort(all.begin(), all.end(),
            [](const plan::SplitPrediction& a, const plan::SplitPrediction& b) {
              return a.step_s < b.step_s;
            });
  std::vector<plan::SplitPrediction> chosen, rest;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool keep = all[i].choice.layers == planned.layers ||
                      all[i].choice.layers == even.layers || static_cast<int>(i) < max_runs / 2;
    (keep ? chosen : rest).push_back(all[i]);
  }
  std::mt19937 random(7);
  std::shuffle(rest.begin(), rest.end(), random);
  for (const plan::SplitPrediction& p : rest) {
    if (static_cast<int>(chosen.size()) >= max_runs) break;
    chosen.push_back(p);
  }
  return chosen;
}

struct Row {
  plan::SplitPrediction predicted;
  double measured_sps = 0;
  double Error() const { return predicted.samples_per_s / std::max(measured_sps, 1e-9) - 1; }
};

int RunPlanBench(const PlanBenchOptions& o) {
  const std::string config = o.config.empty() ? harness::DefaultJobSpec() : o.config;
  absl::StatusOr<harness::RewrittenJobSpec> rewritten =
      harness::RewriteJobSpec(config, o.overrides);
  if (!rewritten.ok()) {
    std::fprintf(stderr, "strait bench plan: %s\n",
                 std::string(rewritten.status().message()).c_str());
    return 2;
  }
  JobSpec spec = rewritten->spec;
  // Sites not named run uncapped.
  absl::StatusOr<std::map<std::string, double>> quotas =
      harness::ParseSiteCpus(o.site_cpus, SiteIds(spec));
  plan::FederationProfile profiles;
  absl::Status s = quotas.status();
  if (s.ok()) s = harness::AddLinkProfiles(spec, o.links, &profiles);
  if (!s.ok()) {
    std::fprintf(stderr, "strait bench plan: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  // The profiles are measured on the rewritten spec (its steps and schedule do not matter to
  // them, its microbatch and model do).
  const harness::TempDir dir;
  const std::string job = dir.File("job.yaml");
  std::ofstream(job) << rewritten->yaml;
  absl::StatusOr<plan::FederationProfile> measured = ProfileSites(job, spec, *quotas);
  if (!measured.ok()) {
    std::fprintf(stderr, "strait bench plan: %s\n",
                 std::string(measured.status().message()).c_str());
    return 1;
  }
  plan::MergeFederationProfile(*measured, &profiles);

  JobSpec planned_spec = spec;
  for (SiteSpec& site : planned_spec.sites) site.plan_layers = true;
  planned_spec.training.plan_extra_in_flight = o.plan_in_flight;
  absl::StatusOr<plan::SplitPlan> plan = plan::PlanSplit(planned_spec, profiles);
  if (!plan.ok()) {
    std::fprintf(stderr, "strait bench plan: %s\n", std::string(plan.status().message()).c_str());
    return 2;
  }
  for (const std::string& line : plan::DescribePlan(planned_spec, *plan)) {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  const plan::SplitChoice planned = plan->ranked.front().choice;
  std::vector<plan::SplitPrediction> all;
  for (const std::vector<LayerRange>& split : plan::ContiguousSplits(planned_spec, 100000)) {
    absl::StatusOr<plan::SplitPrediction> p =
        plan::PredictPlannedSplit(planned_spec, profiles, split);
    if (p.ok()) all.push_back(*std::move(p));
  }
  const plan::SplitChoice even{plan::EvenSplit(planned_spec), 0};
  const std::vector<plan::SplitPrediction> chosen = Chosen(all, planned, even, o.max_runs);

  const std::map<std::string, harness::LinkProfile> links = EmulatedLinks(profiles);
  std::vector<Row> rows;
  if (!o.json) {
    std::printf("%-28s %9s %14s %14s %13s %13s %8s\n", "split", "in flight", "predicted ms",
                "measured ms", "predicted s/s", "measured s/s", "error");
  }
  for (const plan::SplitPrediction& p : chosen) {
    harness::JobSpecOverrides overrides = o.overrides;
    overrides.layers = p.choice.layers;
    overrides.extra_in_flight = p.choice.extra_in_flight;
    absl::StatusOr<harness::RewrittenJobSpec> run_spec = harness::RewriteJobSpec(config, overrides);
    if (!run_spec.ok()) {
      std::fprintf(stderr, "strait bench plan: %s\n",
                   std::string(run_spec.status().message()).c_str());
      return 1;
    }
    harness::LocalFederation fed(run_spec->yaml, SiteIds(run_spec->spec));
    absl::StatusOr<FederationRun> run = RunFederation(fed, run_spec->spec, links, o.site_cpus);
    if (!run.ok()) {
      std::fprintf(stderr, "strait bench plan: %s\n", std::string(run.status().message()).c_str());
      return 1;
    }
    const Row row{p, run->steady_samples_per_second};
    rows.push_back(row);
    const std::string tag = p.choice.layers == planned.layers ? " planned"
                            : p.choice.layers == even.layers  ? " even"
                                                              : "";
    if (!o.json) {
      std::printf("%-28s %9s %14.1f %14.1f %13.0f %13.0f %+7.1f%%%s\n",
                  plan::SplitToString(p.choice.layers).c_str(),
                  absl::StrCat("+", p.choice.extra_in_flight).c_str(), p.step_s * 1e3,
                  spec.training.global_batch / std::max(row.measured_sps, 1e-9) * 1e3,
                  p.samples_per_s, row.measured_sps, 100 * row.Error(), tag.c_str());
      // Where the prediction went wrong: each site's compute as measured in the run beside the
      // profile's sum over its layers.
      const double steps = static_cast<double>(run_spec->spec.training.steps);
      const double microbatches = steps * spec.training.microbatches;
      for (size_t i = 0; i < run->sites.size(); ++i) {
        const SiteFigures& site = run->sites[i];
        const plan::StageCost& cost = p.stages[i];
        std::printf(
            "    %-8s f+b %6.2f ms/microbatch (profile %6.2f), update %6.1f ms (%6.1f), "
            "busy %3.0f%%\n",
            site.id.c_str(),
            1e3 * (site.time.value("forward_s", 0.0) + site.time.value("backward_s", 0.0)) /
                microbatches,
            1e3 * (cost.forward_s + cost.backward_s),
            1e3 * site.time.value("update_s", 0.0) / steps, 1e3 * cost.update_s,
            100 * (1 - site.WaitFraction()));
      }
      std::fflush(stdout);
    }
  }
  const auto find = [&](const plan::SplitChoice& c) {
    return *std::find_if(rows.begin(), rows.end(),
                         [&](const Row& r) { return r.predicted.choice.layers == c.layers; });
  };
  const Row best = *std::max_element(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.measured_sps < b.measured_sps;
  });
  const Row planned_row = find(planned), even_row = find(even);
  double worst_error = 0;
  for (const Row& r : rows) worst_error = std::max(worst_error, std::abs(r.Error()));
  const double of_best = planned_row.measured_sps / best.measured_sps;
  const double over_even = planned_row.measured_sps / even_row.measured_sps;
  if (o.json) {
    nlohmann::json out = {{"planned", plan::SplitToString(planned.layers)},
                          {"planned_samples_per_second", planned_row.measured_sps},
                          {"best", plan::SplitToString(best.predicted.choice.layers)},
                          {"best_samples_per_second", best.measured_sps},
                          {"even_samples_per_second", even_row.measured_sps},
                          {"planned_of_best", of_best},
                          {"planned_over_even", over_even},
                          {"worst_prediction_error", worst_error},
                          {"splits", all.size()},
                          {"runs", rows.size()}};
    std::printf("%s\n", out.dump(1).c_str());
  } else {
    std::printf(
        "\nplanned %s: %.0f samples/s = %.1f%% of the best measured (%s), %.2fx the even split "
        "%s; predictions within %.1f%% of the measured step time (%zu of %zu splits run)\n",
        plan::SplitToString(planned.layers).c_str(), planned_row.measured_sps, 100 * of_best,
        plan::SplitToString(best.predicted.choice.layers).c_str(), over_even,
        plan::SplitToString(even.layers).c_str(), 100 * worst_error, rows.size(), all.size());
  }
  return 0;
}

}  // namespace

void AddBenchPlanCommand(CLI::App& bench, int* exit_code) {
  auto o = std::make_shared<PlanBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "plan",
      "The split planner's choice against the even split and every other contiguous split, "
      "trained one after the other on loopback with sites under CPU quotas and behind emulated "
      "links: measured samples/s beside predicted");
  cmd->add_option("-c,--config", o->config,
                  "Job spec (default: configs/fashion-mlp-3site.yaml of this source tree); its "
                  "ranges are replaced by each split's")
      ->type_name("FILE");
  harness::AddJobSpecOverrideOptions(*cmd, o->overrides, "Steps per run (default 40)");
  cmd->add_option("--site-cpus", o->site_cpus,
                  "Cap a site's processes at this many CPU cores: repeatable, e.g. --site-cpus "
                  "dc-b=0.25")
      ->type_name("SITE=CORES");
  cmd->add_option("--link", o->links,
                  "Put a site behind an emulated link, SITE=NAME (metro, region, continent, "
                  "satellite) or SITE=RATE:ONE_WAY_DELAY; repeatable")
      ->type_name("SITE=LINK");
  cmd->add_option("--max-runs", o->max_runs,
                  "Splits to train at most (beyond: the best by prediction and a sample)")
      ->capture_default_str()
      ->check(CLI::Range(2, 1000));
  cmd->add_flag("--plan-in-flight", o->plan_in_flight,
                "Train each split with the extra_in_flight the planner chooses for it (as "
                "training.extra_in_flight: auto), instead of the job spec's");
  cmd->add_flag("--json", o->json, "Print JSON instead of a table");
  cmd->callback([o, exit_code] { *exit_code = RunPlanBench(*o); });
}

}  // namespace strait::bench
