// StageExecutor across the ranks of a multi-machine site (stage_executor.h, rank_call.h): the
// leader's mirroring of its calls and a follower's serving of them.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {

std::pair<int64_t, int> StageExecutor::RankRows(int n, int rank) const {
  return rows_.PartRows(n, rank / tensor_parallel_ * workers(), workers());
}

absl::Status StageExecutor::TensorStatus() const {
  return tensor_reducer_ == nullptr ? absl::OkStatus() : tensor_reducer_->status();
}

std::vector<float> StageExecutor::ShardsFor(absl::Span<const float> whole, int rank) const {
  if (tensor_parallel_ == 1 || peers_ == nullptr || whole.empty()) {
    return std::vector<float>(whole.begin(), whole.end());  // A follower's are its shards.
  }
  const Stage& s = stage(0);
  const int64_t full = s.full_param_count(), local = s.param_count();
  const int64_t arenas = static_cast<int64_t>(whole.size()) / full;
  std::vector<float> out(arenas * local);
  for (int64_t a = 0; a < arenas; ++a) {
    s.TakeShards(whole.data() + a * full, rank % tensor_parallel_, out.data() + a * local);
  }
  return out;
}

absl::Span<const float> StageExecutor::OwnShards(absl::Span<const float> whole,
                                                 std::vector<float>& storage) const {
  if (tensor_parallel_ == 1 || peers_ == nullptr) return whole;
  storage = ShardsFor(whole, rank_);
  return storage;
}

absl::StatusOr<std::vector<float>> StageExecutor::Whole(ShardedState which, int64_t step) const {
  STRAIT_ASSIGN_OR_RETURN(std::vector<float> own, Local(which, step));
  if (tensor_parallel_ == 1 || peers_ == nullptr || own.empty()) return own;
  // Every tensor rank of the leader's replica (ranks 0 .. T-1) holds a shard of each arena.
  for (int r = 1; r < tensor_parallel_; ++r) {
    STRAIT_RETURN_IF_ERROR(peers_->Send(
        r, {.op = RankOp::kReadShard, .step = step, .weights = static_cast<int64_t>(which)}));
  }
  const Stage& s = stage(0);
  const int64_t full = s.full_param_count(), local = s.param_count();
  const int64_t arenas = static_cast<int64_t>(own.size()) / local;
  std::vector<float> whole(arenas * full);
  absl::Status status;
  auto place = [&](const std::vector<float>& shard, int index) {
    if (shard.size() != own.size()) {
      status.Update(absl::InternalError(absl::StrCat("tensor rank ", index, " holds ", shard.size(),
                                                     " floats; rank 0 ", own.size())));
      return;
    }
    for (int64_t a = 0; a < arenas; ++a) {
      s.PutShards(shard.data() + a * local, index, whole.data() + a * full);
    }
  };
  place(own, 0);
  for (int r = 1; r < tensor_parallel_; ++r) {
    absl::StatusOr<RankResult> shard = peers_->Await(r);
    if (shard.ok()) {
      place(shard->values, r);
    } else {
      status.Update(shard.status());
    }
  }
  if (!status.ok()) return status;
  return whole;
}

absl::Status StageExecutor::Mirrored(
    const std::function<RankCall(int rank)>& make, const std::function<absl::Status()>& local,
    const std::function<absl::Status(int rank, RankResult&)>& take) {
  if (peers_ == nullptr) return local();
  absl::Status status;
  std::vector<bool> sent(ranks_, false);
  for (int r = 1; r < ranks_; ++r) {
    absl::Status s = peers_->Send(r, make(r));
    sent[r] = s.ok();
    status.Update(s);
  }
  // Without every follower the local part could wait forever in a collective.
  if (status.ok()) status.Update(local());
  for (int r = 1; r < ranks_; ++r) {
    if (!sent[r]) continue;
    absl::StatusOr<RankResult> result = peers_->Await(r);
    if (!result.ok()) {
      status.Update(result.status());
    } else if (take && status.ok()) {
      status.Update(take(r, *result));
    }
  }
  return status;
}

absl::Status StageExecutor::PlaceRows(const std::vector<float>& values,
                                      std::pair<int64_t, int> rows, int64_t features, float* whole,
                                      const char* what) {
  const auto [first, count] = rows;
  if (static_cast<int64_t>(values.size()) != count * features) {
    return absl::InternalError(absl::StrCat("a rank sent ", values.size(), " floats of ", what,
                                            " for its ", count, " rows of ", features));
  }
  std::copy(values.begin(), values.end(), whole + first * features);
  return absl::OkStatus();
}

absl::StatusOr<RankResult> StageExecutor::ServeForward(const RankCall& c) {
  if (c.rows < 1 || c.rows > max_batch_) {
    return absl::InvalidArgumentError(absl::StrCat("mirrored Forward of ", c.rows,
                                                   " samples; this stage takes 1 to ", max_batch_));
  }
  const int64_t in = input_features(), out = output_features();
  const std::pair<int64_t, int> rows = RankRows(c.rows, rank_);
  // The whole microbatch's buffers, of which this rank fills and reads its rows only.
  std::vector<float> input(c.rows * in), output(c.wants_output ? c.rows * out : 0);
  absl::Status placed = PlaceRows(c.values, rows, in, input.data(), "input");
  if (!placed.ok()) return absl::InvalidArgumentError(placed.message());
  ForwardOptions options{
      .training = c.training, .weights = c.weights, .layer_weights = c.layer_weights};
  STRAIT_RETURN_IF_ERROR(Forward(c.step, c.microbatch, c.rows, input.data(),
                                 c.wants_output ? output.data() : nullptr, options));
  RankResult result;
  if (c.wants_output) {
    result.values.assign(output.begin() + rows.first * out,
                         output.begin() + (rows.first + rows.second) * out);
  }
  return result;
}

absl::StatusOr<RankResult> StageExecutor::ServeBackward(const RankCall& c) {
  auto it = in_flight_.find(c.microbatch);
  if (it == in_flight_.end()) {
    return absl::FailedPreconditionError(absl::StrCat("mirrored Backward(microbatch ", c.microbatch,
                                                      ") without a Forward of that microbatch"));
  }
  const int n = it->second.rows;
  const int64_t in = input_features(), out = output_features();
  const std::pair<int64_t, int> rows = RankRows(n, rank_);
  std::vector<float> grad_output, grad_input(c.wants_output ? n * in : 0);
  if (!is_last()) {
    grad_output.resize(n * out);
    absl::Status placed = PlaceRows(c.values, rows, out, grad_output.data(), "output gradient");
    if (!placed.ok()) return absl::InvalidArgumentError(placed.message());
  }
  STRAIT_RETURN_IF_ERROR(Backward(c.microbatch, is_last() ? nullptr : grad_output.data(),
                                  c.wants_output ? grad_input.data() : nullptr, c.last_of_step));
  RankResult result;
  if (c.wants_output) {
    result.values.assign(grad_input.begin() + rows.first * in,
                         grad_input.begin() + (rows.first + rows.second) * in);
  }
  return result;
}

absl::StatusOr<RankResult> StageExecutor::Serve(const RankCall& c) {
  RankResult result;
  switch (c.op) {
    case RankOp::kForward:
      return ServeForward(c);
    case RankOp::kBackward:
      return ServeBackward(c);
    case RankOp::kLoss: {
      auto it = in_flight_.find(c.microbatch);
      if (it == in_flight_.end() || !is_last()) {
        return absl::FailedPreconditionError(
            absl::StrCat("mirrored Loss(microbatch ", c.microbatch, ") out of turn"));
      }
      const int n = it->second.rows;
      const int64_t targets = stage(0).targets_per_sample();
      const auto [first, rows] = RankRows(n, rank_);
      if (static_cast<int64_t>(c.labels.size()) != rows * targets) {
        return absl::InvalidArgumentError(absl::StrCat("mirrored Loss with ", c.labels.size(),
                                                       " labels for ", rows, " rows of ", targets));
      }
      std::vector<int32_t> labels(n * targets);
      std::copy(c.labels.begin(), c.labels.end(), labels.begin() + first * targets);
      result.losses.resize(workers());
      STRAIT_RETURN_IF_ERROR(OnWorkers([&](int w) -> absl::Status {
        STRAIT_ASSIGN_OR_RETURN(result.losses[w],
                                LossOnWorker(w, c.microbatch, n, labels.data(), c.scale));
        return absl::OkStatus();
      }));
      return result;
    }
    case RankOp::kDiscard:
      Discard(c.microbatch);
      return result;
    case RankOp::kZeroGrad:
      ZeroGrad(c.step);
      return result;
    case RankOp::kScaleGrads:
      STRAIT_RETURN_IF_ERROR(ScaleGrads(c.step, {c.layer_start, c.layer_end}, c.scale));
      return result;
    case RankOp::kAddTiedGrad:
      STRAIT_RETURN_IF_ERROR(AddTiedGrad(c.step, c.values));
      return result;
    case RankOp::kTieLocalGrads:
      STRAIT_RETURN_IF_ERROR(TieLocalGrads(c.step));
      return result;
    case RankOp::kOptimizerStep:
      STRAIT_RETURN_IF_ERROR(OptimizerStep(c.step, c.scale));
      return result;
    case RankOp::kSetParams:
      STRAIT_RETURN_IF_ERROR(SetParams(c.values));
      return result;
    case RankOp::kRestoreWeights:
      STRAIT_RETURN_IF_ERROR(RestoreWeights(c.weights, c.values, c.previous, c.lookahead));
      return result;
    case RankOp::kSetOptimizerState:
      STRAIT_RETURN_IF_ERROR(SetOptimizerState(c.values));
      return result;
    case RankOp::kReadShard: {
      if (c.weights < 0 || c.weights > static_cast<int64_t>(ShardedState::kOptimizer)) break;
      STRAIT_ASSIGN_OR_RETURN(result.values, Local(static_cast<ShardedState>(c.weights), c.step));
      return result;
    }
    case RankOp::kGradSumSquares: {
      const Worker& w = workers_[0];
      STRAIT_ASSIGN_OR_RETURN(result.sum,
                              w.stage->GradSumSquaresOf(w.history->grads(c.step), 0.0, true));
      return result;
    }
  }
  return absl::InvalidArgumentError("unknown mirrored call");
}

}  // namespace strait::site
