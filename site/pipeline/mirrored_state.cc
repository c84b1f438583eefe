#include "site/pipeline/mirrored_state.h"

namespace strait::site {

absl::Status MirroredState::Scatter(
    const RankCall& base, absl::Span<const float> whole,
    const std::function<absl::Status(absl::Span<const float> own)>& local) {
  auto call = [&](int rank) {
    RankCall c = base;
    c.values = shards_.ShardsFor(whole, rank);
    return c;
  };
  std::vector<float> storage;
  const absl::Span<const float> own = shards_.OwnShards(whole, storage);
  return fan_out_.Run(call, [&] { return local(own); });
}

absl::Status MirroredState::SetParams(absl::Span<const float> params) {
  return Scatter({.op = RankOp::kSetParams}, params,
                 [&](absl::Span<const float> own) { return local_.state().SetParams(own); });
}

absl::Status MirroredState::RestoreWeights(int64_t version, absl::Span<const float> newest,
                                           absl::Span<const float> previous,
                                           absl::Span<const float> lookahead) {
  auto call = [&](int rank) {
    RankCall c{.op = RankOp::kRestoreWeights, .weights = version};
    c.values = shards_.ShardsFor(newest, rank);
    c.previous = shards_.ShardsFor(previous, rank);
    c.lookahead = shards_.ShardsFor(lookahead, rank);
    return c;
  };
  std::vector<float> storage[3];
  const absl::Span<const float> own_newest = shards_.OwnShards(newest, storage[0]),
                                own_previous = shards_.OwnShards(previous, storage[1]),
                                own_lookahead = shards_.OwnShards(lookahead, storage[2]);
  return fan_out_.Run(call, [&] {
    return local_.state().RestoreWeights(version, own_newest, own_previous, own_lookahead);
  });
}

absl::Status MirroredState::SetOptimizerState(absl::Span<const float> state) {
  return Scatter({.op = RankOp::kSetOptimizerState}, state, [&](absl::Span<const float> own) {
    return local_.state().SetOptimizerState(own);
  });
}

absl::Status MirroredState::SetGrads(int64_t step, absl::Span<const float> grads) {
  return Scatter({.op = RankOp::kSetGrads, .step = step}, grads,
                 [&](absl::Span<const float> own) { return local_.state().SetGrads(step, own); });
}

}  // namespace strait::site
