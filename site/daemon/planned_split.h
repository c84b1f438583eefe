// `layers: auto` on a site (DESIGN.md §4, issue 30): before it builds its stage, the site measures
// its per-layer profile (or takes the cached one: site/plan/site_profiler.h), probes its link to
// the gateway, sends both with a Plan call and waits until the gateway has planned the split from
// every site's profile. What it runs from then on is the planned split (core/job_view.h) and the
// planned extra_in_flight.
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "plan/split_planner.h"
#include "site/rpc/plan_client.h"

namespace strait::site {

struct PlannedSplitOptions {
  PlanDial dial;
  int threads = 1;         // Compute threads per worker, as the stage will run.
  std::string cache_path;  // The cached profile.
  bool profile_again = false;
  std::chrono::seconds timeout{300};  // How long to wait for the gateway and the other sites.
};

// Every site's range and extra_in_flight as the gateway planned them for `spec` (which plans its
// split): the caller runs plan/split_planner.h WithSplit and WithPlannedInFlight of it. Logs the
// plan. Errors: the profile's measurement, the gateway's refusal, or a plan that does not fit
// `spec`.
absl::StatusOr<plan::SplitChoice> TakePlannedSplit(const JobSpec& spec, int index,
                                                   const PlannedSplitOptions& options);

}  // namespace strait::site
