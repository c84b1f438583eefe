#include "site/daemon/planned_split.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/job_agreement.h"
#include "core/status.h"
#include "plan/split_planner.h"
#include "site/plan/site_profiler.h"

namespace strait::site {

absl::StatusOr<plan::SplitChoice> TakePlannedSplit(const JobSpec& spec, int index,
                                                   const PlannedSplitOptions& o) {
  const SiteSpec& site = spec.sites[index];
  std::error_code ignored;
  std::filesystem::create_directories(std::filesystem::path(o.cache_path).parent_path(), ignored);
  bool measured = false;
  spdlog::info("layers: auto: profiling {} layers on {} (or taking {})", spec.model.NumLayers(),
               ProfiledDevice(site, o.threads), o.cache_path);
  STRAIT_ASSIGN_OR_RETURN(const plan::SiteProfile profile,
                          CachedSiteProfile(spec, index, o.cache_path, o.profile_again,
                                            {.threads = o.threads}, &measured));
  spdlog::info("{} profile of {} layers", measured ? "measured the" : "took the cached",
               profile.layers.size());
  STRAIT_ASSIGN_OR_RETURN(const plan::MeasuredLink link, ProbeLink(o.dial, o.timeout));
  spdlog::info("link to the gateway: {:.1f} ms round trip, {:.1f} MB/s", link.round_trip_s * 1e3,
               link.bytes_per_second / 1e6);
  v1::PlanRequest request;
  request.set_agreed_job(AgreedJobText(spec));
  *request.mutable_profile() = plan::ToProto(profile);
  request.set_round_trip_s(link.round_trip_s);
  request.set_bytes_per_second(link.bytes_per_second);
  STRAIT_ASSIGN_OR_RETURN(const v1::PlanReply reply, RequestPlan(o.dial, request, o.timeout));
  plan::SplitChoice choice{.extra_in_flight = static_cast<int>(reply.extra_in_flight())};
  for (const v1::LayerRange& r : reply.layers()) {
    choice.layers.push_back({static_cast<int>(r.start()), static_cast<int>(r.end())});
  }
  // The gateway planned it from the same spec; still, a split that does not tile the model or
  // moves a pinned range is refused rather than run.
  absl::Status fits = plan::ApplySplit(spec, JobView::Initial(spec), choice.layers).status();
  for (size_t s = 0; fits.ok() && s < spec.sites.size(); ++s) {
    if (!spec.sites[s].plan_layers && !(choice.layers[s] == spec.sites[s].layers)) {
      fits = absl::InvalidArgumentError(
          absl::StrCat("it moves the pinned layers of ", spec.sites[s].id));
    }
  }
  if (!fits.ok()) {
    return absl::InternalError(
        absl::StrCat("the gateway planned the split ", plan::SplitToString(choice.layers),
                     ", which does not fit this job spec: ", fits.message()));
  }
  if (reply.description_size() > 0) spdlog::info("plan: {}", reply.description(0));
  return choice;
}

}  // namespace strait::site
