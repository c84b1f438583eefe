// What a site runs in one rollback generation (DESIGN.md §7), as its session drives it: steps until
// the last, evaluations between them, checkpointable state, and an abort when the gateway pauses or
// rolls back. A student site runs a SiteRunner (its stage of the pipeline, trained); a teacher site
// of knowledge sharing a TeacherRunner (its teacher stage, forward only).
// For the training thread, except Abort.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "site/data/dataset.h"
#include "site/nn/evaluation.h"
#include "site/pipeline/stage_frames.h"

namespace strait::site {

// What a stage's own data holds: the first stage reads inputs (a teacher's first stage too), the
// last stage labels; a middle stage needs only the test split's size (to follow the evaluation
// batches). Shared, read-only: a site keeps one copy across the runners of successive rollback
// generations.
struct StageData {
  std::shared_ptr<const Dataset> train, test;  // Set on the first and the last stage.
  int64_t test_size = 0;
};

// Where the stage's tensors come from and go to: its links and its own data, as a stage of pipeline
// `replica` (JobView::replica: its data shard and the replica of its tensor keys).
struct StageIo {
  StageLinks links;
  StageData data;
  int replica = 0;
};

// The steps a runner takes: the stage holds the state after `start_step` steps; `total_steps` is
// how far the run goes (frames are announced one step ahead, never beyond it); `generation` is the
// federation's rollback generation, part of every tensor key.
struct StepRange {
  int64_t total_steps = 0;
  int64_t start_step = 0;
  uint32_t generation = 0;
};

struct StepResult {
  int64_t step = 0;                // The step just taken (0-based).
  std::optional<double> loss;      // Mean cross-entropy over the global batch (last stage).
  std::optional<double> accuracy;  // Fraction of the batch classified correctly (last stage).
  // Of the step's time, the part that is the pipeline's drain rather than its steady state: with
  // deferred 2bw, the last step's update of its own gradient (with clipping it waits for a scale
  // that travels the whole chain and back). 0 in every other step.
  double drain_s = 0;
};

class GenerationRunner {
 public:
  virtual ~GenerationRunner() = default;

  virtual int64_t step() const = 0;  // Steps completed.
  // Optimizer updates applied (what a checkpoint taken now holds: SiteRunner::updates()).
  virtual int64_t updates() const = 0;
  // One global step; `then_evaluate`: Evaluate() comes next. Blocks on the neighbours; an error
  // leaves the runner unusable.
  virtual absl::StatusOr<StepResult> Step(bool then_evaluate) = 0;
  // The held-out evaluation between steps: the result on the student's last stage, nullopt
  // elsewhere.
  virtual absl::StatusOr<std::optional<Evaluation>> Evaluate() = 0;
  // What outer rounds carry from one round to the next (sync outer), for checkpoints; nullopt
  // without them.
  virtual std::optional<std::vector<float>> OuterState() const = 0;
  // Blocks until the gateway holds everything sent.
  virtual absl::Status Flush() = 0;
  // Makes waiting receivers and senders fail with `status`, so that Step returns. Thread-safe.
  virtual void Abort(const absl::Status& status) = 0;
};

}  // namespace strait::site
