// A site's profile for the split planner (plan/site_profile.h): its layers measured with the
// site's own device, workers and threads (layer_profile.h), and the memory its stage may use. The
// profile is cached in a file, so that a rejoin or a restart does not measure again unless the
// model, the device or the layout changed, or the operator asks (strait-site --profile-again).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "plan/site_profile.h"
#include "site/plan/layer_profile.h"

namespace strait::site {

struct SiteProfilerOptions {
  int threads = 1;            // CPU threads of each worker's backend.
  int64_t memory_bytes = -1;  // What the stage may use; -1: the memory available (MemAvailable).
  // Each layer: one warm-up run, then the median of three timed runs of at least 0.25 s.
  ProfileOptions timing{.warmup = 1, .repeats = 3, .min_run_s = 0.25};
};

// "cpu x2 workers x1 threads" (", quota 0.25 cores" under a CPU quota: core/cpu_time.h): what a
// profile was measured on; a cached one counts only when this is the same, so a site whose
// container got another CPU limit measures again.
std::string ProfiledDevice(const SiteSpec& site, int threads);

// Measures spec.sites[index]: every layer of the model at the job's microbatch size.
absl::StatusOr<plan::SiteProfile> MeasureSiteProfile(const JobSpec& spec, int index,
                                                     const SiteProfilerOptions& options);

// The profile in `cache_path` when it is of this site, model (ProfiledModel) and device
// (ProfiledDevice) and `again` is false; otherwise measured and written there (atomically, so a
// crash leaves the old file or the new one). `measured` (optional) says which happened.
absl::StatusOr<plan::SiteProfile> CachedSiteProfile(const JobSpec& spec, int index,
                                                    const std::string& cache_path, bool again,
                                                    const SiteProfilerOptions& options,
                                                    bool* measured = nullptr);

// Bytes of memory available to this process now: MemAvailable, or the cgroup's limit when lower.
int64_t AvailableMemoryBytes();

}  // namespace strait::site
