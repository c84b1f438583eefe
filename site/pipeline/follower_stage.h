// A follower rank's stage on a site of several ranks (DESIGN.md §4): its own LocalExecutor (its
// rows of each microbatch; its shards under tensor parallelism), driven by the calls its leader's
// RankMirror sends (rank_call.h). Made for every rollback generation by strait-site's follower
// ranks (site/daemon/rank_follower.h) and by LocalRankPeers in tests and benchmarks.
// Not thread-safe: one thread serves the calls, in the order the leader sent them.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "site/pipeline/local_executor.h"
#include "site/pipeline/rank_call.h"
#include "site/pipeline/row_split.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {

class FollowerStage {
 public:
  // StageExecutor::Create's arguments for rank workers.rank >= 1.
  static absl::StatusOr<std::unique_ptr<FollowerStage>> Create(
      const ModelSpec& model, LayerRange range, const OptimizerSpec& optimizer, int max_batch,
      WeightVersioning versioning, const StageWorkers& workers);

  // Runs the call its leader mirrored with this rank's rows of the microbatch; returns this rank's
  // rows of the outputs. InvalidArgument for a call whose sizes do not fit the stage (the leader's
  // link is authenticated, but is checked like any input).
  absl::StatusOr<RankResult> Serve(const RankCall& call);

  // This rank's own part (its rows, its shards), for tests.
  const StageExecutor& stage() const { return *local_; }

 private:
  FollowerStage(std::unique_ptr<LocalExecutor> local, SiteRows rows, int rank)
      : local_(std::move(local)), rows_(rows), rank_(rank) {}
  // The calls with rows, placed in whole-microbatch buffers of which this rank uses its rows.
  absl::StatusOr<RankResult> ServeForward(const RankCall& call);
  absl::StatusOr<RankResult> ServeLoss(const RankCall& call);
  absl::StatusOr<RankResult> ServeBackward(const RankCall& call);

  const std::unique_ptr<LocalExecutor> local_;
  const SiteRows rows_;
  const int rank_;
};

}  // namespace strait::site
