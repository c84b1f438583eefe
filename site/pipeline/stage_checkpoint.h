// A stage's checkpoint file for a job (site/nn/checkpoint.h format): what `strait train` and each
// site save and load, through the one stage interface (site/pipeline/stage_executor.h).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/env.h"
#include "core/job_spec.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {

// Writes the parameters and optimizer state of `stage` after `step` steps of `spec` to `path`
// (atomically, through `env`). With two weight versions (2bw) the stage must have just made L_step
// (its weights_version() is `step`: FailedPrecondition otherwise), and the file holds L_step and
// what a run resumed at step `step` computes with (L_{step-1}; with lookahead P_{step-1} and
// P_step). Blocks on disk I/O.
absl::Status SaveStageCheckpoint(const std::string& path, const JobSpec& spec,
                                 const StageExecutor& stage, int64_t step,
                                 Env* env = Env::Default());

// Restores `stage` from `path` (read through `env`) and returns the step it was saved at.
// FailedPrecondition when the file comes from another model, split, optimizer, seeds, or a schedule
// with another number of weight versions (2bw vs 1f1b / gpipe) or another lookahead;
// ReadCheckpoint's errors otherwise (a format version this build does not read among them).
absl::StatusOr<int64_t> LoadStageCheckpoint(const std::string& path, const JobSpec& spec,
                                            StageExecutor& stage, Env* env = Env::Default());

}  // namespace strait::site
