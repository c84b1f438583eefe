// CPU time used by this process, and the cores it may use: beside wall time, how much of the
// machine a piece of work took (the benchmarks compare it with what the cores can give).
#pragma once

namespace strait {

// User plus system CPU seconds of every thread of this process so far.
double ProcessCpuSeconds();

// The cores the calling thread may run on (its affinity mask, as `taskset` or a container's cpuset
// set it), at least 1; the machine's count when the mask cannot be read.
int UsableCores();

// The CPU quota of this process's own cgroup in cores (cgroup v2 cpu.max, or v1
// cpu.cfs_quota_us / cpu.cfs_period_us), e.g. 0.25; 0 when it has none or it cannot be read.
// Quotas of the cgroup's ancestors are not looked at.
double CpuQuotaCores();

}  // namespace strait
