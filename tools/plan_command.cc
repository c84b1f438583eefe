// `strait profile` measures one site's per-layer costs into a profiles file; `strait plan` reads
// the file and prints the split the planner chooses (plan/split_planner.h), offline.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/job_spec.h"
#include "harness/plan_profiles.h"
#include "harness/wan/link_profile.h"
#include "plan/site_profile.h"
#include "plan/split_planner.h"
#include "site/plan/site_profiler.h"
#include "tools/command.h"

namespace strait::tools {
namespace {

struct ProfileArgs {
  std::string config, site, out = "profiles.json";
  int threads = 1;
  double memory_mib = -1;
  double cpus = 0;
  double min_run_s = 0.25;
  int repeats = 3;
};

void PrintProfile(const plan::SiteProfile& p) {
  std::printf("site %s on %s, model %s, memory %.0f MiB\n", p.site.c_str(), p.device.c_str(),
              p.model.c_str(), p.memory_bytes / 1048576.0);
  std::printf("  layer  forward ms  backward ms  update ms  params MiB  per microbatch MiB\n");
  for (const plan::LayerProfile& l : p.layers) {
    std::printf("  %5d  %10.3f  %11.3f  %9.3f  %10.2f  %18.2f\n", l.layer, l.forward_s * 1e3,
                l.backward_s * 1e3, l.update_s * 1e3, l.param_bytes / 1048576.0,
                l.microbatch_bytes / 1048576.0);
  }
}

int RunProfile(const ProfileArgs& a) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(a.config);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  const int index = spec->SiteIndex(a.site);
  if (index < 0) {
    std::fprintf(stderr, "strait profile: --site %s is not a site of %s\n", a.site.c_str(),
                 a.config.c_str());
    return 2;
  }
  site::SiteProfilerOptions options{.threads = a.threads};
  options.memory_bytes = a.memory_mib < 0 ? -1 : static_cast<int64_t>(a.memory_mib * 1048576);
  options.timing.repeats = a.repeats;
  options.timing.min_run_s = a.min_run_s;
  std::fprintf(stderr, "strait profile: measuring %d layers of site %s%s ...\n",
               spec->model.NumLayers(), a.site.c_str(),
               a.cpus > 0 ? absl::StrFormat(" under a quota of %.2f cores", a.cpus).c_str() : "");
  absl::StatusOr<plan::SiteProfile> profile =
      a.cpus > 0 ? harness::ProfileUnderQuota(a.config, a.site, a.cpus, options)
                 : site::MeasureSiteProfile(*spec, index, options);
  if (!profile.ok()) {
    std::fprintf(stderr, "strait profile: %s\n", std::string(profile.status().message()).c_str());
    return 1;
  }
  PrintProfile(*profile);
  plan::FederationProfile file;
  if (access(a.out.c_str(), F_OK) == 0) {
    absl::StatusOr<plan::FederationProfile> old = plan::ReadFederationProfile(a.out);
    if (!old.ok()) {
      std::fprintf(stderr, "strait profile: %s (move it away to start a new file)\n",
                   std::string(old.status().message()).c_str());
      return 1;
    }
    file = *std::move(old);
  }
  plan::MergeFederationProfile({.sites = {*profile}}, &file);
  if (absl::Status s = plan::WriteFederationProfile(file, a.out); !s.ok()) {
    std::fprintf(stderr, "strait profile: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("wrote %s (%zu site profiles)\n", a.out.c_str(), file.sites.size());
  return 0;
}

struct PlanArgs {
  std::string config, profiles;
  std::vector<std::string> links;
  int runner_ups = 3;
};

int RunPlan(const PlanArgs& a) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec(a.config);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<plan::FederationProfile> profiles = plan::ReadFederationProfile(a.profiles);
  absl::Status s = profiles.status();
  if (s.ok()) s = harness::AddLinkProfiles(*spec, a.links, &*profiles);
  if (!s.ok()) {
    std::fprintf(stderr, "strait plan: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (!spec->PlansSplit()) {
    std::printf("every site of %s pins its layers; planning as if each said layers: auto\n",
                a.config.c_str());
    for (SiteSpec& site : spec->sites) site.plan_layers = true;
  }
  absl::StatusOr<plan::SplitPlan> plan =
      plan::PlanSplit(*spec, *profiles, {.runner_ups = a.runner_ups});
  if (!plan.ok()) {
    std::fprintf(stderr, "strait plan: %s\n", std::string(plan.status().message()).c_str());
    return 2;
  }
  for (const std::string& line : plan::DescribePlan(*spec, *plan))
    std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

void AddPlanCommands(CLI::App& app, int* exit_code) {
  auto p = std::make_shared<ProfileArgs>();
  CLI::App* profile = app.add_subcommand(
      "profile",
      "Measure one site's forward, backward and update time per layer of the job's model at its "
      "microbatch size, on this machine with the site's device and workers, and add it to a "
      "profiles file for `strait plan`");
  profile->add_option("--config", p->config, "Job spec")->required()->type_name("FILE");
  profile->add_option("--site", p->site, "The site to measure as")->required();
  profile->add_option("-o,--out", p->out, "Profiles file to add it to (created if absent)")
      ->capture_default_str();
  profile->add_option("--threads", p->threads, "Compute threads per worker")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  profile->add_option("--memory-mib", p->memory_mib,
                      "Memory the site's stage may use (default: what this machine has free)");
  profile->add_option("--cpus", p->cpus,
                      "Measure under a cgroup CPU quota of this many cores (e.g. 0.3), as "
                      "`strait demo --site-cpus` runs a site");
  profile->add_option("--min-run", p->min_run_s, "Seconds each timed run repeats a layer's pass")
      ->capture_default_str();
  profile->add_option("--repeats", p->repeats, "Timed runs per layer (the median counts)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  profile->callback([=] { *exit_code = RunProfile(*p); });

  auto a = std::make_shared<PlanArgs>();
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Choose the split of layers over the sites (and extra_in_flight when the spec says auto) "
      "from saved profiles: print the split, the predicted step time and samples/s, what bounds "
      "it, the runner-ups and the even split");
  plan->add_option("--config", a->config, "Job spec")->required()->type_name("FILE");
  plan->add_option("--profiles", a->profiles, "Profiles file (strait profile)")
      ->required()
      ->type_name("FILE");
  plan->add_option("--link", a->links,
                   "A site's link to the gateway, SITE=NAME (metro, region, continent, satellite) "
                   "or SITE=RATE:ONE_WAY_DELAY (e.g. dc-c=100mbit:75ms); overrides the file's")
      ->type_name("SITE=LINK");
  plan->add_option("--runner-ups", a->runner_ups, "Next-best splits to show")
      ->capture_default_str()
      ->check(CLI::Range(0, 100));
  plan->callback([=] { *exit_code = RunPlan(*a); });
}

}  // namespace strait::tools
