// The leader's stage on a site of several ranks (DESIGN.md §4): a StageExecutor that wraps the
// leader's own LocalExecutor and mirrors every call that computes or changes state to the
// followers (rank_call.h RankPeers; each serves it into its own part: follower_stage.h), sending
// each its rows of inputs, labels and gradients and gathering their outputs, losses and input
// gradients. Callers and neighbouring stages see whole microbatches, as from one process. Reads
// of replicated state stay on the leader; with tensor parallelism its getters and setters gather
// and scatter shards (tensor_shards.h, mirrored_state.h). Made by StageExecutor::Create.
// Not thread-safe: one thread drives it; every call blocks until every rank is done.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "site/pipeline/local_executor.h"
#include "site/pipeline/mirrored_state.h"
#include "site/pipeline/rank_fan_out.h"
#include "site/pipeline/row_split.h"
#include "site/pipeline/stage_executor.h"
#include "site/pipeline/tensor_shards.h"

namespace strait::site {

class RankMirror final : public StageExecutor {
 public:
  // `local`: rank 0's part of a site laid out as `rows`; `peers`: ranks 1 .. ranks - 1 (not owned;
  // must outlive this).
  RankMirror(std::unique_ptr<LocalExecutor> local, RankPeers& peers, SiteRows rows,
             int tensor_parallel);

  int64_t weights_version() const override { return local_->weights_version(); }

  // Host floats only: a site of several ranks splits a microbatch's rows between them.
  absl::Status Forward(int64_t step, int microbatch, int n, const BoundaryIn& input,
                       const BoundaryOut& output, const ForwardOptions& options = {}) override;
  absl::StatusOr<LossResult> Loss(int microbatch, const int32_t* labels, float grad_scale) override;
  absl::Status Backward(int microbatch, const BoundaryIn& grad_output,
                        const BoundaryOut& grad_input, bool last_of_step) override;
  void Discard(int microbatch) override;
  void ZeroGrad(int64_t step = 0) override;
  absl::StatusOr<double> GradSumSquares(double downstream = 0.0, int64_t step = 0) override;
  absl::StatusOr<std::vector<float>> TiedGrad(int64_t step) const override {
    return local_->TiedGrad(step);
  }
  absl::Status AddTiedGrad(int64_t step, absl::Span<const float> other) override;
  absl::Status TieLocalGrads(int64_t step) override;
  absl::Status ScaleGrads(int64_t step, LayerRange layers, float factor) override;
  absl::Status OptimizerStep(int64_t step, float grad_scale) override;
  const StageState& state() const override { return state_; }
  StageState& state() override { return state_; }

 private:
  // `call` to every follower and `local` here, for the calls that return no Status: a follower's
  // failure shows in the next call that does.
  void Unchecked(const RankCall& call, const std::function<void()>& local);

  const std::unique_ptr<LocalExecutor> local_;
  const RankFanOut fan_out_;
  const SiteRows rows_;
  const int tensor_parallel_;
  const TensorShards shards_;
  MirroredState state_;
};

}  // namespace strait::site
