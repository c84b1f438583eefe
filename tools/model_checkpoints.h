// Finds and assembles a whole model's parameters from checkpoints (`strait generate`): a `strait
// train` run's final.ckpt, or the sites' shards of a federation run.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"

namespace strait::tools {

struct ModelParams {
  std::vector<float> params;         // The whole model, layer by layer (layout order).
  std::vector<std::string> sources;  // The files they came from, in layer order.
  int64_t step = 0;                  // Steps trained.
};

// Looks in `dir`, in this order, for
//   dir/final.ckpt of all layers (`strait train --out dir`);
//   dir/<site id>/final.ckpt for every site of `spec` (`strait-site --out dir/<id>`, the demo's
//     out/ folder);
//   dir/<site id>/step-<N>.ckpt with the newest N every site holds (the coordinated checkpoints of
//     `checkpoint.dir`).
// Every shard must hold its site's layers of this model; an error names the file and the problem.
absl::StatusOr<ModelParams> LoadModelParams(const JobSpec& spec, const std::string& dir);

}  // namespace strait::tools
