#include "site/pipeline/rank_mirror.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {

RankMirror::RankMirror(std::unique_ptr<LocalExecutor> local, RankPeers& peers, SiteRows rows,
                       int tensor_parallel)
    : StageExecutor(local->shape()),
      local_(std::move(local)),
      fan_out_(peers),
      rows_(rows),
      tensor_parallel_(tensor_parallel),
      shards_(*local_, peers, tensor_parallel),
      state_(*local_, fan_out_, shards_) {}

namespace {

absl::Status HostOnly(const BoundaryIn& in, const BoundaryOut& out, const char* call) {
  if (!in.encoded() && !out.encoded()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      call, " with a codec payload on a site of several ranks, which splits rows between them"));
}

}  // namespace

absl::Status RankMirror::Forward(int64_t step, int microbatch, int n, const BoundaryIn& from,
                                 const BoundaryOut& to, const ForwardOptions& options) {
  STRAIT_RETURN_IF_ERROR(HostOnly(from, to, "Forward"));
  const float* const input = from.host;
  float* const output = to.host;
  STRAIT_ASSIGN_OR_RETURN(const LocalExecutor::InFlight mb,
                          local_->CheckForward(step, microbatch, n, options));
  const int64_t in = input_features(), out = output_features();
  auto call = [&](int rank) {
    RankCall c{.op = RankOp::kForward,
               .step = step,
               .microbatch = microbatch,
               .rows = n,
               .training = options.training,
               .wants_output = output != nullptr && rows_.Answers(rank),
               .weights = mb.weights,
               .layer_weights = mb.layer_weights};
    c.values = RowsOf(input, rows_.Rows(n, rank), in);
    return c;
  };
  auto gather = [&](int rank, RankResult& result) {
    return output == nullptr || !rows_.Answers(rank)
               ? absl::OkStatus()
               : PlaceRows(result.values, rows_.Rows(n, rank), out, output, "output");
  };
  absl::Status s = fan_out_.Run(
      call, [&] { return local_->Forward(step, microbatch, n, input, output, options); }, gather);
  if (!s.ok()) local_->Discard(microbatch);  // What the leader's workers computed, if anything.
  return s;
}

absl::StatusOr<LossResult> RankMirror::Loss(int microbatch, const int32_t* labels,
                                            float grad_scale) {
  STRAIT_ASSIGN_OR_RETURN(const int n, local_->CheckLoss(microbatch));
  const int64_t targets = local_->stage().targets_per_sample();
  // Every part's result, summed in part order below: the same sum as one process of all parts.
  std::vector<LossResult> parts(rows_.parts());
  auto call = [&](int rank) {
    const auto [first, rows] = rows_.Rows(n, rank);
    RankCall c{.op = RankOp::kLoss, .microbatch = microbatch, .scale = grad_scale};
    c.labels.assign(labels + first * targets, labels + (first + rows) * targets);
    return c;
  };
  auto local = [&]() -> absl::Status {
    STRAIT_ASSIGN_OR_RETURN(const std::vector<LossResult> own,
                            local_->LossParts(microbatch, labels, grad_scale));
    std::copy(own.begin(), own.end(), parts.begin());
    return absl::OkStatus();
  };
  auto gather = [&](int rank, RankResult& result) {
    if (!rows_.Answers(rank)) return absl::OkStatus();  // Its replica's first tensor rank counts.
    if (result.losses.size() != static_cast<size_t>(workers())) {
      return absl::InternalError(absl::StrCat("rank ", rank, " sent ", result.losses.size(),
                                              " losses for ", workers(), " workers"));
    }
    std::copy(result.losses.begin(), result.losses.end(), parts.begin() + rows_.FirstPart(rank));
    return absl::OkStatus();
  };
  STRAIT_RETURN_IF_ERROR(fan_out_.Run(call, local, gather));
  return LocalExecutor::Sum(parts);
}

absl::Status RankMirror::Backward(int microbatch, const BoundaryIn& from, const BoundaryOut& to,
                                  bool last_of_step) {
  STRAIT_RETURN_IF_ERROR(HostOnly(from, to, "Backward"));
  const float* const grad_output = from.host;
  float* const grad_input = to.host;
  STRAIT_ASSIGN_OR_RETURN(const LocalExecutor::InFlight* mb,
                          local_->InFlightOf(microbatch, "Backward"));
  const int n = mb->rows;
  const int64_t in = input_features(), out = output_features();
  auto call = [&](int rank) {
    RankCall c{.op = RankOp::kBackward,
               .microbatch = microbatch,
               .last_of_step = last_of_step,
               // Every tensor rank computes the input gradient (its last all-reduce is part of
               // that); only the first of a replica's is used.
               .wants_output = grad_input != nullptr};
    if (grad_output != nullptr) c.values = RowsOf(grad_output, rows_.Rows(n, rank), out);
    return c;
  };
  auto local = [&] {
    return local_->Backpropagate(microbatch, grad_output, grad_input, last_of_step);
  };
  auto gather = [&](int rank, RankResult& result) {
    return grad_input == nullptr || !rows_.Answers(rank)
               ? absl::OkStatus()
               : PlaceRows(result.values, rows_.Rows(n, rank), in, grad_input, "input gradient");
  };
  STRAIT_RETURN_IF_ERROR(fan_out_.Run(call, local, gather));
  local_->Retire(microbatch);  // Kept after an error: Discard frees what the workers still hold.
  return absl::OkStatus();
}

void RankMirror::Unchecked(const RankCall& call, const std::function<void()>& local) {
  fan_out_
      .Run([&](int) { return call; },
           [&] {
             local();
             return absl::OkStatus();
           })
      .IgnoreError();
}

void RankMirror::Discard(int microbatch) {
  if (!local_->holds(microbatch)) return;
  Unchecked({.op = RankOp::kDiscard, .microbatch = microbatch},
            [&] { local_->Discard(microbatch); });
}

void RankMirror::ZeroGrad(int64_t step) {
  Unchecked({.op = RankOp::kZeroGrad, .step = step}, [&] { local_->ZeroGrad(step); });
}

absl::StatusOr<double> RankMirror::GradSumSquares(double downstream, int64_t step) {
  // Without tensor parallelism the reduced gradient is the same on every rank: the leader's.
  if (tensor_parallel_ == 1) return local_->GradSumSquares(downstream, step);
  return shards_.GradSumSquares(downstream, step);
}

absl::Status RankMirror::ScaleGrads(int64_t step, LayerRange layers, float factor) {
  STRAIT_ASSIGN_OR_RETURN(const auto span, local_->LayerSpan(layers));
  if (span.first == span.second) return absl::OkStatus();
  auto call = [&](int) {
    return RankCall{.op = RankOp::kScaleGrads,
                    .step = step,
                    .scale = factor,
                    .layer_start = layers.start,
                    .layer_end = layers.end};
  };
  return fan_out_.Run(call, [&] { return local_->ScaleGrads(step, layers, factor); });
}

absl::Status RankMirror::AddTiedGrad(int64_t step, absl::Span<const float> other) {
  auto call = [&](int) {
    RankCall c{.op = RankOp::kAddTiedGrad, .step = step};
    c.values.assign(other.begin(), other.end());
    return c;
  };
  return fan_out_.Run(call, [&] { return local_->AddTiedGrad(step, other); });
}

absl::Status RankMirror::TieLocalGrads(int64_t step) {
  // Called every step whatever the model: without both copies, nothing to send.
  if (local_->stage().tied_offsets().size() != 2) return absl::OkStatus();
  return fan_out_.Run([&](int) { return RankCall{.op = RankOp::kTieLocalGrads, .step = step}; },
                      [&] { return local_->TieLocalGrads(step); });
}

absl::Status RankMirror::OptimizerStep(int64_t step, float grad_scale) {
  STRAIT_RETURN_IF_ERROR(local_->CheckUpdate(step));
  auto call = [&](int) {
    return RankCall{.op = RankOp::kOptimizerStep, .step = step, .scale = grad_scale};
  };
  return fan_out_.Run(call, [&] { return local_->OptimizerStep(step, grad_scale); });
}

}  // namespace strait::site
