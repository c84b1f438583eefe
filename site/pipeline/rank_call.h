// How the leader of a site of several ranks (machines) drives the other ranks (DESIGN.md §4): every
// StageExecutor call of the leader that computes or changes state is mirrored (rank_mirror.h) to
// each follower as a RankCall carrying that rank's rows of the microbatch; the follower makes the
// same call on its own part (FollowerStage::Serve) and answers with a RankResult. Reads of the
// replicated state (parameters, norms, checkpoints) stay on the leader, whose copy equals every
// rank's.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "site/nn/stage.h"
#include "site/pipeline/stage_state.h"

namespace strait::site {

enum class RankOp {
  kForward,
  kLoss,
  kBackward,
  kDiscard,
  kZeroGrad,
  kScaleGrads,
  kAddTiedGrad,
  kTieLocalGrads,
  kOptimizerStep,
  kSetParams,
  kRestoreWeights,
  kSetOptimizerState,
  // Tensor parallelism: the leader reads its tensor peers' shards and sums.
  kReadShard,       // `weights`: which state (ShardedState); `step`: the gradient's step.
  kGradSumSquares,  // Of the split parameters' gradient of step `step`.
  kSetGrads,        // Replicas: the gradient of step `step` becomes `values` (their mean).
  kLastOp = kSetGrads,
};

// The arguments of one StageExecutor call; which fields count depends on `op`
// (FollowerStage::Serve).
struct RankCall {
  RankOp op = RankOp::kForward;
  int64_t step = 0;    // Forward, ZeroGrad, ScaleGrads, AddTiedGrad, TieLocalGrads, OptimizerStep,
                       // SetGrads.
  int microbatch = 0;  // Forward, Loss, Backward, Discard.
  int rows = 0;  // Forward: the whole microbatch's rows (n), of which `values` are this rank's.
  bool training = true;       // Forward.
  bool last_of_step = false;  // Backward.
  bool wants_output = false;  // Forward: the output rows; Backward: the input gradient rows.
  int64_t weights = 0;        // Forward (ForwardOptions::weights); RestoreWeights: the version.
  std::vector<int64_t> layer_weights;  // Forward.
  float scale = 0;  // Loss: grad_scale; ScaleGrads: factor; OptimizerStep: grad_scale.
  int layer_start = 0, layer_end = 0;  // ScaleGrads.
  // Forward: this rank's input rows; Backward: its output-gradient rows (empty on the last stage);
  // AddTiedGrad: `other`; SetParams, RestoreWeights: the newest weights; SetOptimizerState;
  // SetGrads: the gradient.
  std::vector<float> values;
  std::vector<float> previous, lookahead;  // RestoreWeights.
  std::vector<int32_t> labels;             // Loss: this rank's rows of the labels.
};

struct RankResult {
  // Forward: the output rows; Backward: the input-gradient rows; kReadShard: the shard.
  std::vector<float> values;
  double sum = 0;                  // kGradSumSquares.
  std::vector<LossResult> losses;  // Loss: one per worker of the rank, in worker order.
};

// The leader's view of its followers (ranks 1 .. ranks - 1). Calls come from the one thread that
// drives the leader's StageExecutor. After any failure (a rank gone, silent past the site's
// heartbeat timeout, or answering with an error) every later call fails too: the site has failed
// and its group must be formed again.
class RankPeers {
 public:
  virtual ~RankPeers() = default;
  virtual int ranks() const = 0;  // Including the leader.
  // Queues `call` for follower `rank`; does not wait for it.
  virtual absl::Status Send(int rank, RankCall call) = 0;
  // The result of the oldest call sent to `rank` and not awaited yet, or its error.
  virtual absl::StatusOr<RankResult> Await(int rank) = 0;
};

}  // namespace strait::site
