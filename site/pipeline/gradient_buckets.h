// The reduction of a stage's gradients across a process's workers (and, on a site of several
// ranks, across its ranks) during the backward pass of a step's last microbatch (DESIGN.md §4):
// one bucket per layer with parameters, numbered in backward order (last layer first) so that a
// bucket is summed while the earlier layers still compute, and one AllReducer
// (site/collective/all_reducer.h) per gradient arena of the weight history. Used by LocalExecutor;
// each worker's thread drives its own GradientRound.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/backend/backend.h"
#include "site/collective/all_reducer.h"
#include "site/pipeline/worker_set.h"

namespace strait::site {

// Makes the reduction that sums the workers' gradient arenas of one step parity in place:
// arenas[w] (param_count floats on backends[w]); buckets are numbered in the order Backward makes
// them ready. May return null when there is nothing to reduce.
using ReducerMaker = std::function<absl::StatusOr<std::unique_ptr<AllReducer>>(
    const std::vector<Backend*>& backends, std::vector<float*> arenas,
    std::vector<Bucket> buckets)>;

// The in-process all-reduce of `device` workers (CPU: shared memory; CUDA: NCCL, worker w on
// device w); null for one worker.
ReducerMaker InProcessReducer(DeviceKind device);

class GradientBuckets {
 public:
  // The buckets of `workers`' stages and a reduction per gradient arena made by `make` (none when
  // it makes null). The workers must outlive this.
  static absl::StatusOr<std::unique_ptr<GradientBuckets>> Create(const WorkerSet& workers,
                                                                 const ReducerMaker& make,
                                                                 DeviceKind device);

 private:
  friend class GradientRound;
  explicit GradientBuckets(DeviceKind device) : device_(device) {}

  const DeviceKind device_;
  std::vector<std::unique_ptr<AllReducer>> reducers_;  // Per gradient arena, or none.
  std::vector<int> layer_bucket_;  // Stage layer -> reduction bucket (-1: no parameters).
  int num_buckets_ = 0;
};

// One worker's part in the reduction of the gradient of step `step`, made on that worker's thread
// for each backward pass: it reduces only when `last_of_step` (and there is a reduction).
// Every worker takes part in the round, also one without rows or whose backward failed.
class GradientRound {
 public:
  GradientRound(const GradientBuckets& buckets, int worker, Backend& backend, int64_t step,
                bool last_of_step);
  GradientRound(const GradientRound&) = delete;
  GradientRound& operator=(const GradientRound&) = delete;

  // What Stage::Backward calls as each layer's gradient is complete; null when not reducing.
  const std::function<void(int layer)>& layer_done() const { return layer_done_; }
  // Ends this worker's round after its backward pass returned `pass`: the first error of the
  // pass, of its layers' readiness and of the reduction.
  absl::Status Finish(absl::Status pass);

 private:
  const GradientBuckets& buckets_;
  const int worker_;
  Backend& backend_;
  AllReducer* const reducer_;
  int next_bucket_ = 0;  // Buckets become ready in increasing order.
  absl::Status status_;
  std::function<void(int layer)> layer_done_;
};

}  // namespace strait::site
