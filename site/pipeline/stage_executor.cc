#include "site/pipeline/stage_executor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/pipeline/local_executor.h"
#include "site/pipeline/rank_mirror.h"

namespace strait::site {

absl::StatusOr<LossResult> StageExecutor::DistillLoss(int, const int32_t*, const TeacherTargets&,
                                                      const DistillTerms&, float) {
  return absl::FailedPreconditionError(
      "this stage cannot take a teacher's targets: a teacher's student must end on a site of one "
      "machine");
}

absl::StatusOr<std::unique_ptr<StageExecutor>> StageExecutor::Create(
    const ModelSpec& model, LayerRange range, const OptimizerSpec& optimizer, int max_batch,
    WeightVersioning versioning, const StageWorkers& workers) {
  if (workers.rank != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a StageExecutor for rank ", workers.rank,
                                                   ": a follower rank's stage is a FollowerStage"));
  }
  STRAIT_ASSIGN_OR_RETURN(
      std::unique_ptr<LocalExecutor> local,
      LocalExecutor::Create(model, range, optimizer, max_batch, versioning, workers));
  if (workers.peers == nullptr) return local;
  return std::make_unique<RankMirror>(
      std::move(local), *workers.peers,
      SiteRows(workers.ranks, workers.tensor_parallel, workers.count), workers.tensor_parallel);
}

}  // namespace strait::site
