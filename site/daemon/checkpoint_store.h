// One site's coordinated checkpoints (DESIGN.md §7): <checkpoint.dir>/<site id>/step-<N>.ckpt,
// written atomically every `checkpoint.every` steps, the newest `checkpoint.keep` kept (at least
// two: sites can be one checkpoint apart, and the federation rolls back to the newest step they all
// hold). Files go through an Env (core/env.h): the local disk in strait-site, memory in tests.
//
// Not thread-safe: the site's training thread owns it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/env.h"
#include "core/job_spec.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {

class CheckpointStore {
 public:
  // Checkpoints of site `site_id` of `spec`, in `env`'s files (both must outlive the store).
  CheckpointStore(const JobSpec& spec, const std::string& site_id, Env& env);

  const std::string& dir() const { return dir_; }
  // The files and clock of this site's checkpoints (layer moves use them too).
  Env& env() const { return env_; }
  std::string PathFor(int64_t step) const;
  // True when the job spec asks for a checkpoint after `step` completed steps.
  bool Due(int64_t step) const;

  // Writes the stage after `step` steps, then removes checkpoints beyond the retention count.
  // Blocks on disk I/O.
  // `outer_state` (replicas with sync: outer: SiteRunner::OuterState), written first as
  // step-<N>.ckpt.outer, so that a checkpoint that exists has it.
  absl::Status Save(int64_t step, const StageExecutor& stage,
                    const std::vector<float>* outer_state = nullptr);

  // Steps of the checkpoint files present, oldest first (not verified).
  std::vector<int64_t> Steps() const;

  // The newest checkpoint that reads back intact (checksum, lengths) and belongs to this stage of
  // this job; each one refused on the way is logged with its reason and skipped. NotFound when
  // none.
  absl::StatusOr<int64_t> NewestValid(const StageExecutor& stage) const;

  // Restores `stage` from the checkpoint of `step`. An error names the file and what is wrong.
  absl::Status Load(int64_t step, StageExecutor& stage) const;
  // The outer rounds' state saved with the checkpoint of `step` (see Save).
  absl::StatusOr<std::vector<float>> LoadOuterState(int64_t step) const;

 private:
  const JobSpec& spec_;
  Env& env_;
  const std::string dir_;
  const int keep_;
};

}  // namespace strait::site
