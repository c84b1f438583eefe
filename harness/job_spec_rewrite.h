// Rewrites a job spec for a federation that runs in another directory (`strait demo`,
// `strait bench e2e`): the federation's own certificates under certs/ and checkpoints under
// checkpoints/ of that directory, the file's other relative paths made absolute, and the command
// line's overrides applied. Everything else stays as the operator wrote it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"

namespace strait::harness {

struct JobSpecOverrides {
  int64_t steps = 0;            // > 0: train this many steps instead of training.steps / epochs.
  std::string codec;            // Non-empty: every link's chain in both directions, unless...
  std::string forward_codec;    // ...non-empty: every link's forward chain.
  std::string backward_codec;   // ...non-empty: every link's backward chain.
  int global_batch = 0;         // > 0: training.global_batch.
  int microbatches = 0;         // > 0: training.microbatches.
  std::string schedule;         // Non-empty: training.schedule (2bw: without eval_every).
  int extra_in_flight = -1;     // >= 0: training.extra_in_flight.
  double lookahead = -1;        // >= 0: training.lookahead.
  std::string update;           // Non-empty: training.update.
  std::string stale_gradients;  // Non-empty: training.stale_gradients.
  double grad_clip = -1;        // >= 0: training.grad_clip.
  std::string chunk_size;       // Non-empty: gateway.chunk_size (checked by the job spec loader).
  std::vector<LayerRange> layers;  // Non-empty: sites[i].layers, one range per site.
  int checkpoint_every = 0;        // > 0: training.checkpoint.every.
  std::string sync;                // Non-empty: training.sync (replicas only); every_step drops
                                   // training.outer.
  int outer_every = 0;             // > 0: training.outer.every (with sync: outer).
  int outer_bits = 0;              // > 0: training.outer.bits (with sync: outer).
  int outer_fragments = 0;         // > 0: training.outer.fragments (with sync: outer).
  int outer_delay = -1;            // >= 0: training.outer.delay (with sync: outer).
  double outer_lr = -1;            // >= 0: training.outer.lr (with sync: outer).
  double outer_momentum = -1;      // >= 0: training.outer.momentum (with sync: outer).
};

struct RewrittenJobSpec {
  std::string yaml;  // To be written as the job spec of the other directory.
  JobSpec spec;      // The same, parsed (paths resolved as if that directory were "/").
};

// The rewritten job spec, checked by the job spec loader. InvalidArgument with the loader's
// `file:line:column` message when `path` or an override is not valid.
absl::StatusOr<RewrittenJobSpec> RewriteJobSpec(const std::string& path,
                                                const JobSpecOverrides& overrides);

}  // namespace strait::harness
