// StageState (stage_state.h) of the leader of a site of several ranks: the getters read the
// leader's copy (every replica holds the same), with tensor parallelism assembled from its
// replica's shards (tensor_shards.h); the setters send every follower its shards
// (rank_call.h) and write the leader's own. Part of RankMirror; from the thread that drives it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "site/pipeline/local_executor.h"
#include "site/pipeline/rank_fan_out.h"
#include "site/pipeline/stage_state.h"
#include "site/pipeline/tensor_shards.h"

namespace strait::site {

class MirroredState final : public StageState {
 public:
  // None owned; all must outlive this.
  MirroredState(LocalExecutor& local, const RankFanOut& fan_out, const TensorShards& shards)
      : local_(local), fan_out_(fan_out), shards_(shards) {}

  // The leader's copy, assembled from its replica's shards under tensor parallelism.
  absl::StatusOr<std::vector<float>> Read(ShardedState which, int64_t step) const override {
    return shards_.Whole(which, step);
  }

  absl::Status SetParams(absl::Span<const float> params) override;
  absl::Status RestoreWeights(int64_t version, absl::Span<const float> newest,
                              absl::Span<const float> previous,
                              absl::Span<const float> lookahead) override;
  absl::Status SetOptimizerState(absl::Span<const float> state) override;
  absl::Status SetGrads(int64_t step, absl::Span<const float> grads) override;

 private:
  // Sends every follower `base` with its shards of `whole` as the values, and gives the leader's
  // to `local`.
  absl::Status Scatter(const RankCall& base, absl::Span<const float> whole,
                       const std::function<absl::Status(absl::Span<const float> own)>& local);

  LocalExecutor& local_;
  const RankFanOut& fan_out_;
  const TensorShards& shards_;
};

}  // namespace strait::site
