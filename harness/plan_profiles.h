// Profiles for the split planner made on one machine: a site's profile measured under a CPU quota
// (a child `strait profile` in a cgroup, tools/cpu_quota.h) and link profiles written as `strait
// wan` names them. Shared by `strait profile`, `strait plan` and `strait bench plan`.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "plan/site_profile.h"
#include "site/plan/site_profiler.h"

namespace strait::harness {

// Measures `site` of the job spec at `config` in a child process of this executable
// (`strait profile`) capped at `cores` CPUs. Blocks until it is done (a minute at most per layer).
absl::StatusOr<plan::SiteProfile> ProfileUnderQuota(const std::string& config,
                                                    const std::string& site, double cores,
                                                    const site::SiteProfilerOptions& options);

// The link profile of "SITE=NAME" (metro, region, continent, satellite: tools/wan/link_profile.h)
// or "SITE=RATE:ONE_WAY_DELAY" ("dc-c=100mbit:75ms"). InvalidArgument naming the value for a
// malformed one or a site `spec` does not have.
absl::StatusOr<plan::MeasuredLink> ParseSiteLink(const JobSpec& spec, const std::string& text);

// Each of `links` (ParseSiteLink) into `profiles`, replacing a link of the same site.
absl::Status AddLinkProfiles(const JobSpec& spec, const std::vector<std::string>& links,
                             plan::FederationProfile* profiles);

}  // namespace strait::harness
