// What a site measures of itself for the split planner (DESIGN.md §4 `layers: auto`; issue 30):
// per layer of the model, the forward and backward time of one microbatch of the job's size on
// this site's devices and workers and the optimizer's step (warm-up runs, then the median of timed
// ones), and the memory the layer needs: parameters, optimizer state, and what one microbatch in
// flight keeps.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "plan/site_profile.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {

struct ProfileOptions {
  int microbatch = 1;  // Rows: the job's microbatch size.
  int warmup = 2;      // Untimed runs first (allocations, caches).
  int repeats = 5;     // Timed runs; the median counts.
  // Each timed run repeats the pass until it has taken this long (then divides): a process under
  // a CPU quota is throttled per scheduling period, and a pass shorter than one would be timed
  // at full speed.
  double min_run_s = 0;
  // The process runs under a CPU quota of this many cores (0: none; core/cpu_time.h
  // CpuQuotaCores): a pass counts at least its CPU time over the quota, the pace the quota allows
  // over a long run, which a short run may beat while the quota's period has time left.
  double cpu_quota_cores = 0;
  // The schedule's weight versions (2bw keeps two and extrapolates): the update's time includes
  // what they cost.
  WeightVersioning versioning;
};

// Profiles layers `range` of `model`, each as a stage of its own on `workers` (the site's device,
// workers and threads) with `optimizer`. Inputs are zeros (a valid token id for a language model)
// and the output gradient ones: the time of dense layers does not depend on the values.
absl::StatusOr<std::vector<plan::LayerProfile>> ProfileLayers(const ModelSpec& model,
                                                              LayerRange range,
                                                              const OptimizerSpec& optimizer,
                                                              const StageWorkers& workers,
                                                              const ProfileOptions& options);

}  // namespace strait::site
