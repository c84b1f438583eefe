// StageState (stage_state.h) of one process's workers: the getters read worker 0's copy (every
// worker holds the same), the setters write every worker. On a site of several ranks this is the
// rank's own part (its shards under tensor parallelism), which the leader's RankMirror gathers and
// scatters. Driven by the thread that drives the workers; blocking.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "site/pipeline/stage_state.h"
#include "site/pipeline/worker_set.h"

namespace strait::site {

class LocalState final : public StageState {
 public:
  explicit LocalState(WorkerSet& workers) : workers_(workers) {}  // Not owned; must outlive this.

  // This process's copy, its own shards under tensor parallelism.
  absl::StatusOr<std::vector<float>> Read(ShardedState which, int64_t step) const override;

  absl::Status SetParams(absl::Span<const float> params) override;
  absl::Status RestoreWeights(int64_t version, absl::Span<const float> newest,
                              absl::Span<const float> previous,
                              absl::Span<const float> lookahead) override;
  absl::Status SetOptimizerState(absl::Span<const float> state) override;
  absl::Status SetGrads(int64_t step, absl::Span<const float> grads) override;

 private:
  WorkerSet& workers_;
};

}  // namespace strait::site
