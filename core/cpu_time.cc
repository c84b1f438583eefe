#include "core/cpu_time.h"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"

namespace strait {

double ProcessCpuSeconds() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0.0;
  auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

double CpuQuotaCores() {
  std::ifstream cgroups("/proc/self/cgroup");
  std::string line;
  while (std::getline(cgroups, line)) {
    // "0::/path" (v2) or "ID:cpu,cpuacct:/path" (v1, the cpu controller).
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    const std::string path = line.substr(b + 1);
    double quota = 0, period = 0;
    if (controllers == ",,") {
      std::ifstream max("/sys/fs/cgroup" + path + "/cpu.max");
      std::string q;
      if (!(max >> q >> period) || !absl::SimpleAtod(q, &quota)) quota = 0;  // "max": none.
    } else if (controllers.find(",cpu,") != std::string::npos) {
      std::ifstream q("/sys/fs/cgroup/cpu" + path + "/cpu.cfs_quota_us");
      std::ifstream p("/sys/fs/cgroup/cpu" + path + "/cpu.cfs_period_us");
      if (!(q >> quota && p >> period)) quota = 0;
    }
    if (quota > 0 && period > 0) return quota / period;
  }
  return 0;
}

}  // namespace strait
