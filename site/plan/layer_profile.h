// What a site measures of itself for the split planner (DESIGN.md §4 `layers: auto`; issue 30):
// per layer of the model, the forward and backward time of one microbatch of the job's size on
// this site's devices and workers (warm-up runs, then the median of timed ones), and the memory
// the layer needs: parameters, optimizer state, and what one microbatch in flight keeps.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {

struct LayerProfile {
  int layer = 0;
  double forward_s = 0;   // One microbatch, the loss included on the model's last layer.
  double backward_s = 0;  // One microbatch.
  int64_t param_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t microbatch_bytes = 0;  // Activations and saved tensors of one microbatch in flight.
};

struct ProfileOptions {
  int microbatch = 1;  // Rows: the job's microbatch size.
  int warmup = 2;      // Untimed runs first (allocations, caches).
  int repeats = 5;     // Timed runs; the median counts.
};

// Profiles layers `range` of `model`, each as a stage of its own on `workers` (the site's device,
// workers and threads) with `optimizer`. Inputs are zeros (a valid token id for a language model)
// and the output gradient ones: the time of dense layers does not depend on the values.
absl::StatusOr<std::vector<LayerProfile>> ProfileLayers(const ModelSpec& model, LayerRange range,
                                                        const OptimizerSpec& optimizer,
                                                        const StageWorkers& workers,
                                                        const ProfileOptions& options);

}  // namespace strait::site
