#include "site/pipeline/follower_stage.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {

absl::StatusOr<std::unique_ptr<FollowerStage>> FollowerStage::Create(
    const ModelSpec& model, LayerRange range, const OptimizerSpec& optimizer, int max_batch,
    WeightVersioning versioning, const StageWorkers& workers) {
  if (workers.rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a follower's stage for rank ", workers.rank, ": followers are ranks 1 on"));
  }
  STRAIT_ASSIGN_OR_RETURN(
      std::unique_ptr<LocalExecutor> local,
      LocalExecutor::Create(model, range, optimizer, max_batch, versioning, workers));
  const SiteRows rows(workers.ranks, workers.tensor_parallel, workers.count);
  return std::unique_ptr<FollowerStage>(new FollowerStage(std::move(local), rows, workers.rank));
}

absl::StatusOr<RankResult> FollowerStage::ServeForward(const RankCall& c) {
  if (c.rows < 1 || c.rows > local_->max_batch()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mirrored Forward of ", c.rows, " samples; this stage takes 1 to ", local_->max_batch()));
  }
  const int64_t in = local_->input_features(), out = local_->output_features();
  const std::pair<int64_t, int> rows = rows_.Rows(c.rows, rank_);
  // The whole microbatch's buffers, of which this rank fills and reads its rows only.
  std::vector<float> input(c.rows * in), output(c.wants_output ? c.rows * out : 0);
  absl::Status placed = PlaceRows(c.values, rows, in, input.data(), "input");
  if (!placed.ok()) return absl::InvalidArgumentError(placed.message());
  ForwardOptions options{
      .training = c.training, .weights = c.weights, .layer_weights = c.layer_weights};
  STRAIT_RETURN_IF_ERROR(local_->Forward(c.step, c.microbatch, c.rows, input.data(),
                                         c.wants_output ? output.data() : nullptr, options));
  RankResult result;
  if (c.wants_output) result.values = RowsOf(output.data(), rows, out);
  return result;
}

absl::StatusOr<RankResult> FollowerStage::ServeLoss(const RankCall& c) {
  const absl::StatusOr<int> n = local_->CheckLoss(c.microbatch);
  if (!n.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("mirrored Loss(microbatch ", c.microbatch, ") out of turn"));
  }
  const int64_t targets = local_->stage().targets_per_sample();
  const auto [first, rows] = rows_.Rows(*n, rank_);
  if (static_cast<int64_t>(c.labels.size()) != rows * targets) {
    return absl::InvalidArgumentError(absl::StrCat("mirrored Loss with ", c.labels.size(),
                                                   " labels for ", rows, " rows of ", targets));
  }
  std::vector<int32_t> labels(*n * targets);
  std::copy(c.labels.begin(), c.labels.end(), labels.begin() + first * targets);
  RankResult result;
  STRAIT_ASSIGN_OR_RETURN(result.losses, local_->LossParts(c.microbatch, labels.data(), c.scale));
  return result;
}

absl::StatusOr<RankResult> FollowerStage::ServeBackward(const RankCall& c) {
  STRAIT_ASSIGN_OR_RETURN(const LocalExecutor::InFlight* mb,
                          local_->InFlightOf(c.microbatch, "mirrored Backward"));
  const int n = mb->rows;
  const bool last = local_->is_last();
  const int64_t in = local_->input_features(), out = local_->output_features();
  const std::pair<int64_t, int> rows = rows_.Rows(n, rank_);
  std::vector<float> grad_output, grad_input(c.wants_output ? n * in : 0);
  if (!last) {
    grad_output.resize(n * out);
    absl::Status placed = PlaceRows(c.values, rows, out, grad_output.data(), "output gradient");
    if (!placed.ok()) return absl::InvalidArgumentError(placed.message());
  }
  STRAIT_RETURN_IF_ERROR(local_->Backward(c.microbatch, last ? nullptr : grad_output.data(),
                                          c.wants_output ? grad_input.data() : nullptr,
                                          c.last_of_step));
  RankResult result;
  if (c.wants_output) result.values = RowsOf(grad_input.data(), rows, in);
  return result;
}

absl::StatusOr<RankResult> FollowerStage::Serve(const RankCall& c) {
  RankResult result;
  switch (c.op) {
    case RankOp::kForward:
      return ServeForward(c);
    case RankOp::kLoss:
      return ServeLoss(c);
    case RankOp::kBackward:
      return ServeBackward(c);
    case RankOp::kDiscard:
      local_->Discard(c.microbatch);
      return result;
    case RankOp::kZeroGrad:
      local_->ZeroGrad(c.step);
      return result;
    case RankOp::kScaleGrads:
      STRAIT_RETURN_IF_ERROR(local_->ScaleGrads(c.step, {c.layer_start, c.layer_end}, c.scale));
      return result;
    case RankOp::kAddTiedGrad:
      STRAIT_RETURN_IF_ERROR(local_->AddTiedGrad(c.step, c.values));
      return result;
    case RankOp::kTieLocalGrads:
      STRAIT_RETURN_IF_ERROR(local_->TieLocalGrads(c.step));
      return result;
    case RankOp::kOptimizerStep:
      STRAIT_RETURN_IF_ERROR(local_->OptimizerStep(c.step, c.scale));
      return result;
    case RankOp::kSetParams:
      STRAIT_RETURN_IF_ERROR(local_->state().SetParams(c.values));
      return result;
    case RankOp::kRestoreWeights:
      STRAIT_RETURN_IF_ERROR(
          local_->state().RestoreWeights(c.weights, c.values, c.previous, c.lookahead));
      return result;
    case RankOp::kSetOptimizerState:
      STRAIT_RETURN_IF_ERROR(local_->state().SetOptimizerState(c.values));
      return result;
    case RankOp::kSetGrads:
      STRAIT_RETURN_IF_ERROR(local_->state().SetGrads(c.step, c.values));
      return result;
    case RankOp::kReadShard: {
      if (c.weights < 0 || c.weights > static_cast<int64_t>(ShardedState::kOptimizer)) break;
      STRAIT_ASSIGN_OR_RETURN(result.values,
                              local_->state().Read(static_cast<ShardedState>(c.weights), c.step));
      return result;
    }
    case RankOp::kGradSumSquares: {
      STRAIT_ASSIGN_OR_RETURN(result.sum, local_->GradSumSquaresOf(c.step, 0.0, true));
      return result;
    }
  }
  return absl::InvalidArgumentError("unknown mirrored call");
}

}  // namespace strait::site
