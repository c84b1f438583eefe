#include "site/pipeline/tensor_shards.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {

std::vector<float> TensorShards::ShardsFor(absl::Span<const float> whole, int rank) const {
  if (tensor_parallel_ == 1 || whole.empty()) {
    return std::vector<float>(whole.begin(), whole.end());
  }
  const Stage& s = local_.stage();
  const int64_t full = s.full_param_count(), local = s.param_count();
  const int64_t arenas = static_cast<int64_t>(whole.size()) / full;
  std::vector<float> out(arenas * local);
  for (int64_t a = 0; a < arenas; ++a) {
    s.TakeShards(whole.data() + a * full, rank % tensor_parallel_, out.data() + a * local);
  }
  return out;
}

absl::Span<const float> TensorShards::OwnShards(absl::Span<const float> whole,
                                                std::vector<float>& storage) const {
  if (tensor_parallel_ == 1) return whole;
  storage = ShardsFor(whole, 0);
  return storage;
}

absl::StatusOr<std::vector<float>> TensorShards::Whole(ShardedState which, int64_t step) const {
  STRAIT_ASSIGN_OR_RETURN(std::vector<float> own, local_.state().Read(which, step));
  if (tensor_parallel_ == 1 || own.empty()) return own;
  for (int r = 1; r < tensor_parallel_; ++r) {
    STRAIT_RETURN_IF_ERROR(peers_.Send(
        r, {.op = RankOp::kReadShard, .step = step, .weights = static_cast<int64_t>(which)}));
  }
  const Stage& s = local_.stage();
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
    absl::StatusOr<RankResult> shard = peers_.Await(r);
    if (shard.ok()) {
      place(shard->values, r);
    } else {
      status.Update(shard.status());
    }
  }
  if (!status.ok()) return status;
  return whole;
}

absl::StatusOr<double> TensorShards::GradSumSquares(double downstream, int64_t step) const {
  for (int r = 1; r < tensor_parallel_; ++r) {
    STRAIT_RETURN_IF_ERROR(peers_.Send(r, {.op = RankOp::kGradSumSquares, .step = step}));
  }
  absl::StatusOr<double> sum = local_.GradSumSquaresOf(step, downstream, true);
  for (int r = 1; r < tensor_parallel_; ++r) {
    absl::StatusOr<RankResult> part = peers_.Await(r);
    if (!part.ok()) return part.status();
    if (sum.ok()) *sum += part->sum;
  }
  if (!sum.ok()) return sum;
  return local_.GradSumSquaresOf(step, *sum, false);
}

}  // namespace strait::site
