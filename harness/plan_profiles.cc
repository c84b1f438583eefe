#include "harness/plan_profiles.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "harness/cpu_quota.h"
#include "harness/subprocess.h"
#include "harness/wan/link_profile.h"

namespace strait::harness {

absl::StatusOr<plan::SiteProfile> ProfileUnderQuota(const std::string& config,
                                                    const std::string& site, double cores,
                                                    const site::SiteProfilerOptions& options) {
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<CpuQuota> quota,
                          CpuQuota::Create(absl::StrCat("profile-", site), cores));
  const TempDir dir;
  const std::string out = dir.path() + "/profile.json";
  std::vector<std::string> argv = {"/proc/self/exe", "profile",
                                   "--config",       config,
                                   "--site",         site,
                                   "--out",          out,
                                   "--threads",      absl::StrCat(options.threads),
                                   "--min-run",      absl::StrCat(options.timing.min_run_s),
                                   "--repeats",      absl::StrCat(options.timing.repeats)};
  if (options.memory_bytes >= 0) {
    argv.insert(argv.end(), {"--memory-mib", absl::StrCat(options.memory_bytes / 1048576.0)});
  }
  Process child(argv, dir.path() + "/profile.log");
  STRAIT_RETURN_IF_ERROR(quota->Add(child.pid()));
  if (const int code = child.Wait(std::chrono::seconds(3600)); code != 0) {
    return absl::InternalError(absl::StrCat("strait profile of site ", site, " under ", cores,
                                            " cores exited with ", code, ": ", child.LogTail()));
  }
  STRAIT_ASSIGN_OR_RETURN(plan::FederationProfile file, plan::ReadFederationProfile(out));
  const plan::SiteProfile* p = file.Site(site);
  if (p == nullptr) return absl::InternalError(absl::StrCat(out, " has no profile of ", site));
  return *p;
}

absl::StatusOr<plan::MeasuredLink> ParseSiteLink(const JobSpec& spec, const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits('=', 1));
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("link '", text, "': ", why));
  };
  if (parts.size() != 2) return bad("expected SITE=NAME or SITE=RATE:ONE_WAY_DELAY");
  if (spec.SiteIndex(parts[0]) < 0) return bad("no site '" + parts[0] + "' in the job spec");
  LinkProfile link;
  if (absl::StatusOr<LinkProfile> named = NamedProfile(parts[1]); named.ok()) {
    link = *named;
  } else {
    const std::vector<std::string> rate_delay = absl::StrSplit(parts[1], ':');
    if (rate_delay.size() != 2) {
      return bad(absl::StrCat(named.status().message(), ", or RATE:ONE_WAY_DELAY"));
    }
    absl::StatusOr<double> rate = ParseRate(rate_delay[0]);
    absl::StatusOr<std::chrono::microseconds> delay = ParseDuration(rate_delay[1]);
    if (!rate.ok()) return bad(std::string(rate.status().message()));
    if (!delay.ok()) return bad(std::string(delay.status().message()));
    link.rate_bits_per_second = *rate;
    link.one_way_delay = *delay;
  }
  return plan::MeasuredLink{.site = parts[0],
                            .round_trip_s = 2e-6 * link.one_way_delay.count(),
                            .bytes_per_second = link.rate_bits_per_second / 8};
}

absl::Status AddLinkProfiles(const JobSpec& spec, const std::vector<std::string>& links,
                             plan::FederationProfile* profiles) {
  plan::FederationProfile given;
  for (const std::string& text : links) {
    STRAIT_ASSIGN_OR_RETURN(plan::MeasuredLink link, ParseSiteLink(spec, text));
    given.links.push_back(std::move(link));
  }
  plan::MergeFederationProfile(given, profiles);
  return absl::OkStatus();
}

}  // namespace strait::harness
