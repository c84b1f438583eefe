// The leader's view of its replica's tensor ranks (core/tensor_split.h; DESIGN.md §4
// `tensor_parallel`): whole parameters assembled from every tensor rank's shards and split back
// into one rank's shards, and the global gradient norm of sharded layers. Ranks 0 .. T-1 are the
// leader's replica. Without tensor parallelism (T = 1) the leader's own state is whole: shards are
// copies and nothing is gathered. Used by RankMirror; from the one thread that drives it.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "site/pipeline/local_executor.h"
#include "site/pipeline/rank_call.h"

namespace strait::site {

class TensorShards {
 public:
  // `local`: the leader's part; `peers`: its followers. Neither owned; both must outlive this.
  TensorShards(const LocalExecutor& local, RankPeers& peers, int tensor_parallel)
      : local_(local), peers_(peers), tensor_parallel_(tensor_parallel) {}

  // Rank `rank`'s shards of whole parameters `whole` (the optimizer's arenas side by side).
  std::vector<float> ShardsFor(absl::Span<const float> whole, int rank) const;
  // The leader's shards of `whole`: `whole` itself without tensor parallelism (then nothing is
  // copied), else kept in `storage`.
  absl::Span<const float> OwnShards(absl::Span<const float> whole,
                                    std::vector<float>& storage) const;
  // State `which` (of gradient step `step`) as whole parameters: the leader's, assembled with every
  // tensor rank's shards (RankOp::kReadShard).
  absl::StatusOr<std::vector<float>> Whole(ShardedState which, int64_t step) const;
  // Under tensor parallelism (T > 1): `downstream` plus the squares of the gradient of step
  // `step`, the split parameters' sums of every tensor rank in rank order
  // (RankOp::kGradSumSquares), then the replicated ones once.
  absl::StatusOr<double> GradSumSquares(double downstream, int64_t step) const;

 private:
  const LocalExecutor& local_;
  RankPeers& peers_;
  const int tensor_parallel_;
};

}  // namespace strait::site
