#include "harness/cpu_quota.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace strait::harness {
namespace {

// The kernel's default period. A shorter one throttles in finer slices but costs a capped process
// its caches at every slice (the other processes run in between and evict its working set): at
// 10 ms a quarter-core site computed at half the speed its profile measured alone.
constexpr int64_t kPeriodUs = 100000;

bool Writable(const std::string& dir) { return access(dir.c_str(), W_OK) == 0; }

absl::Status WriteFile(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  out << value;
  out.close();
  if (!out) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot write '", value, "' to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return std::string(absl::StripTrailingAsciiWhitespace(text.str()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CpuQuota>> CpuQuota::Create(const std::string& name, double cores) {
  // The kernel's least quota is 1 ms per period.
  if (!(cores >= 0.01) || !std::isfinite(cores)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a CPU quota of ", cores, " cores: give a share of at least 0.01, e.g. 0.3"));
  }
  const std::string leaf = absl::StrCat("strait-", getpid(), "-", name);
  const int64_t quota_us = std::llround(cores * kPeriodUs);
  // cgroup v2: the unified hierarchy, at /sys/fs/cgroup itself or under /sys/fs/cgroup/unified,
  // with the cpu controller available to its children.
  for (const std::string root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    const std::string controllers = root + "/cgroup.subtree_control";
    absl::StatusOr<std::string> enabled = ReadFile(controllers);
    if (!enabled.ok() || !Writable(root)) continue;
    if (enabled->find("cpu") == std::string::npos && !WriteFile(controllers, "+cpu").ok()) {
      continue;
    }
    const std::string path = root + "/" + leaf;
    std::error_code ec;
    std::filesystem::create_directory(path, ec);
    if (ec) continue;
    if (WriteFile(path + "/cpu.max", absl::StrCat(quota_us, " ", kPeriodUs)).ok()) {
      return std::unique_ptr<CpuQuota>(new CpuQuota(path, /*v2=*/true, cores));
    }
    std::filesystem::remove(path, ec);
  }
  // cgroup v1: the cpu controller's hierarchy.
  for (const std::string root : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
    if (!std::filesystem::exists(root + "/cpu.cfs_quota_us") || !Writable(root)) continue;
    const std::string path = root + "/" + leaf;
    std::error_code ec;
    std::filesystem::create_directory(path, ec);
    if (ec) continue;
    absl::Status s = WriteFile(path + "/cpu.cfs_period_us", absl::StrCat(kPeriodUs));
    if (s.ok()) s = WriteFile(path + "/cpu.cfs_quota_us", absl::StrCat(quota_us));
    if (s.ok()) return std::unique_ptr<CpuQuota>(new CpuQuota(path, /*v2=*/false, cores));
    std::filesystem::remove(path, ec);
  }
  return absl::FailedPreconditionError(
      "no writable cgroup hierarchy with a cpu controller (cgroup v2 cpu.max under /sys/fs/cgroup "
      "or v1 cpu.cfs_quota_us under /sys/fs/cgroup/cpu): run as root, or delegate a cgroup to this "
      "user (systemd-run --user --scope -p Delegate=yes), to cap sites' CPU");
}

CpuQuota::~CpuQuota() {
  std::error_code ec;
  std::filesystem::remove(path_, ec);
  if (ec)
    std::fprintf(stderr, "strait: cannot remove cgroup %s: %s\n", path_.c_str(),
                 ec.message().c_str());
}

absl::Status CpuQuota::Add(pid_t pid) {
  return WriteFile(path_ + "/cgroup.procs", absl::StrCat(pid));
}

absl::StatusOr<std::string> CpuQuota::Limit() const {
  if (v2_) return ReadFile(path_ + "/cpu.max");
  absl::StatusOr<std::string> quota = ReadFile(path_ + "/cpu.cfs_quota_us");
  if (!quota.ok()) return quota.status();
  absl::StatusOr<std::string> period = ReadFile(path_ + "/cpu.cfs_period_us");
  if (!period.ok()) return period.status();
  return absl::StrCat(*quota, " ", *period);
}

absl::StatusOr<std::map<std::string, double>> ParseSiteCpus(const std::vector<std::string>& caps,
                                                            const std::vector<std::string>& sites) {
  std::map<std::string, double> cores;
  for (const std::string& cap : caps) {
    const size_t eq = cap.find('=');
    const std::string site = cap.substr(0, eq);
    double n = 0;
    if (eq == std::string::npos || !absl::SimpleAtod(cap.substr(eq + 1), &n) ||
        std::find(sites.begin(), sites.end(), site) == sites.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--site-cpus ", cap, ": expected SITE=CORES with a site of the job spec, e.g. ",
          sites.empty() ? "dc-b" : sites.back(), "=0.3"));
    }
    cores[site] = n;
  }
  return cores;
}

}  // namespace strait::harness
