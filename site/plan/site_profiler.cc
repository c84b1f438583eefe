#include "site/plan/site_profiler.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/cpu_time.h"
#include "core/model_layout.h"
#include "core/status.h"
#include "site/pipeline/weight_history.h"

namespace strait::site {
namespace {

// The first number of a file (0 when it is absent or says "max").
int64_t NumberIn(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  int64_t n = 0;
  if (in >> word && absl::SimpleAtoi(word, &n)) return n;
  return 0;
}

}  // namespace

std::string ProfiledDevice(const SiteSpec& site, int threads) {
  const double quota = CpuQuotaCores();
  return absl::StrCat(ToString(site.device), " x", site.workers, " workers x", threads, " threads",
                      quota > 0 ? absl::StrFormat(", quota %.2f cores", quota) : "");
}

int64_t AvailableMemoryBytes() {
  int64_t available = 0;
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") available = kib * 1024;
  }
  // A cgroup's limit (v2, then v1) when the process runs under a lower one.
  for (const char* limit :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    if (int64_t n = NumberIn(limit); n > 0 && (available == 0 || n < available)) available = n;
  }
  return available;
}

absl::StatusOr<plan::SiteProfile> MeasureSiteProfile(const JobSpec& spec, int index,
                                                     const SiteProfilerOptions& options) {
  const SiteSpec& site = spec.sites[index];
  ProfileOptions timing = options.timing;
  timing.microbatch = spec.training.MicrobatchSize();
  timing.cpu_quota_cores = CpuQuotaCores();
  timing.versioning = VersioningOf(spec.training);
  const StageWorkers workers{.device = site.device,
                             .count = site.workers,
                             .threads = options.threads,
                             .precision = spec.training.precision};
  STRAIT_ASSIGN_OR_RETURN(std::vector<plan::LayerProfile> layers,
                          ProfileLayers(spec.model, {0, spec.model.NumLayers()},
                                        spec.training.optimizer, workers, timing));
  return plan::SiteProfile{
      .site = site.id,
      .model = plan::ProfiledModel(spec),
      .device = ProfiledDevice(site, options.threads),
      .memory_bytes = options.memory_bytes >= 0 ? options.memory_bytes : AvailableMemoryBytes(),
      .layers = std::move(layers)};
}

absl::StatusOr<plan::SiteProfile> CachedSiteProfile(const JobSpec& spec, int index,
                                                    const std::string& cache_path, bool again,
                                                    const SiteProfilerOptions& options,
                                                    bool* measured) {
  const SiteSpec& site = spec.sites[index];
  if (!again && std::filesystem::exists(cache_path)) {
    absl::StatusOr<plan::FederationProfile> cached = plan::ReadFederationProfile(cache_path);
    const plan::SiteProfile* p = cached.ok() ? cached->Site(site.id) : nullptr;
    if (p != nullptr && p->model == plan::ProfiledModel(spec) &&
        p->device == ProfiledDevice(site, options.threads) &&
        static_cast<int>(p->layers.size()) == spec.model.NumLayers()) {
      if (measured != nullptr) *measured = false;
      return *p;
    }
  }
  STRAIT_ASSIGN_OR_RETURN(plan::SiteProfile profile, MeasureSiteProfile(spec, index, options));
  const std::string temporary = cache_path + ".new";
  STRAIT_RETURN_IF_ERROR(plan::WriteFederationProfile({.sites = {profile}}, temporary));
  std::error_code error;
  std::filesystem::rename(temporary, cache_path, error);
  if (error) {
    return absl::InternalError(
        absl::StrCat("cannot write the profile cache ", cache_path, ": ", error.message()));
  }
  if (measured != nullptr) *measured = true;
  return profile;
}

}  // namespace strait::site
