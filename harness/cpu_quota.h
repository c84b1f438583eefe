// Heterogeneous sites on one machine (DESIGN.md §10): a CPU quota for a site's processes through a
// cgroup of its own, so that one machine can stand for datacenters of different speeds
// (`strait demo --site-cpus dc-b=0.3`). cgroup v2 (`cpu.max` in a group under the unified
// hierarchy) where it is writable, else v1 (`cpu.cfs_quota_us` under the cpu controller).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace strait::harness {

class CpuQuota {
 public:
  // A new cgroup named `name` (made unique with this process's pid) limited to `cores` CPUs
  // (e.g. 0.3: 30 ms of CPU every 100 ms, summed over its threads). FailedPrecondition, saying
  // what to do, where no cgroup hierarchy with a cpu controller is writable; InvalidArgument for
  // cores < 0.01 (the kernel grants at least 1 ms per 100 ms period). Thread-compatible.
  static absl::StatusOr<std::unique_ptr<CpuQuota>> Create(const std::string& name, double cores);
  // Removes the cgroup; its processes must have exited (otherwise it stays, and is logged).
  ~CpuQuota();

  // Moves process `pid` (and the threads it starts from now on) into the cgroup.
  absl::Status Add(pid_t pid);

  double cores() const { return cores_; }
  const std::string& path() const { return path_; }  // The cgroup's folder.
  // The limit as the kernel holds it: v2's cpu.max, or v1's "quota period".
  absl::StatusOr<std::string> Limit() const;

 private:
  CpuQuota(std::string path, bool v2, double cores)
      : path_(std::move(path)), v2_(v2), cores_(cores) {}
  std::string path_;
  bool v2_;
  double cores_;
};

// `--site-cpus` values "SITE=CORES" (e.g. "dc-b=0.3") by site. InvalidArgument, with an example,
// for one that is malformed or names no site of `sites`.
absl::StatusOr<std::map<std::string, double>> ParseSiteCpus(const std::vector<std::string>& caps,
                                                            const std::vector<std::string>& sites);

}  // namespace strait::harness
