// One process's part of a stage: its rows of each call on its W workers (worker_set.h). A
// microbatch is split by rows (row_split.h): each worker computes its rows with its own copy of the
// same weights; during the backward pass of a step's last microbatch the gradients are summed
// across the workers (and ranks) bucket by bucket (gradient_buckets.h), then every worker applies
// the same update, so the copies stay identical. W = 1 runs the same code on the caller's thread.
// On a site of one rank it is the whole StageExecutor; on a site of several, the leader's
// RankMirror and a follower's FollowerStage drive it with the same calls, and the extra calls
// below are theirs. Not thread-safe: one thread drives it; every call blocks.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "site/pipeline/gradient_buckets.h"
#include "site/pipeline/local_state.h"
#include "site/pipeline/row_split.h"
#include "site/pipeline/stage_executor.h"
#include "site/pipeline/worker_set.h"

namespace strait::site {

class LocalExecutor final : public StageExecutor {
 public:
  // StageExecutor::Create's arguments, for any rank (every rule of StageWorkers is checked here).
  static absl::StatusOr<std::unique_ptr<LocalExecutor>> Create(
      const ModelSpec& model, LayerRange range, const OptimizerSpec& optimizer, int max_batch,
      WeightVersioning versioning, const StageWorkers& workers);
  ~LocalExecutor() override;

  int64_t weights_version() const override { return history().newest(); }

  // Inputs and outputs are whole microbatches; this process reads and writes its rows only.
  absl::Status Forward(int64_t step, int microbatch, int n, const BoundaryIn& input,
                       const BoundaryOut& output, const ForwardOptions& options = {}) override;
  absl::StatusOr<LossResult> Loss(int microbatch, const int32_t* labels, float grad_scale) override;
  absl::StatusOr<LossResult> DistillLoss(int microbatch, const int32_t* labels,
                                         const TeacherTargets& teacher, const DistillTerms& terms,
                                         float grad_scale) override;
  absl::Status Backward(int microbatch, const BoundaryIn& grad_output,
                        const BoundaryOut& grad_input, bool last_of_step) override;
  void Discard(int microbatch) override;
  void ZeroGrad(int64_t step = 0) override;
  absl::StatusOr<double> GradSumSquares(double downstream = 0.0, int64_t step = 0) override;
  absl::StatusOr<std::vector<float>> TiedGrad(int64_t step) const override;
  absl::Status AddTiedGrad(int64_t step, absl::Span<const float> other) override;
  absl::Status TieLocalGrads(int64_t step) override;
  absl::Status ScaleGrads(int64_t step, LayerRange layers, float factor) override;
  absl::Status OptimizerStep(int64_t step, float grad_scale) override;
  const LocalState& state() const override { return state_; }
  LocalState& state() override { return state_; }

  // For RankMirror and FollowerStage: the checks of the calls above, which the leader makes
  // before it sends a call to its followers, and the parts of the calls.

  // A microbatch between its Forward and its Backward or Discard.
  struct InFlight {
    int rows = 0;  // Of the whole microbatch.
    int64_t step = 0;
    int64_t weights = 0;                 // The version its Forward used (resolved) ...
    std::vector<int64_t> layer_weights;  // ... or one per layer.
  };
  // Forward's checks and the microbatch it would keep (its weights resolved).
  absl::StatusOr<InFlight> CheckForward(int64_t step, int microbatch, int n,
                                        const ForwardOptions& options) const;
  bool holds(int microbatch) const { return in_flight_.count(microbatch) != 0; }
  // Microbatch `microbatch` in flight; FailedPrecondition naming `call` otherwise.
  absl::StatusOr<const InFlight*> InFlightOf(int microbatch, const char* call) const;
  // Loss's checks: the microbatch's rows.
  absl::StatusOr<int> CheckLoss(int microbatch) const;
  // What the student's loss makes of a teacher's targets (DistillLoss).
  struct Teaching {
    const TeacherTargets* targets = nullptr;
    DistillTerms terms;
  };
  // Loss's (with `teaching`: DistillLoss's) result of each worker, in worker order, and their sum
  // in that order.
  absl::StatusOr<std::vector<LossResult>> LossParts(int microbatch, const int32_t* labels,
                                                    float grad_scale,
                                                    const Teaching* teaching = nullptr);
  static LossResult Sum(const std::vector<LossResult>& parts);
  // Backward, except that the microbatch stays in flight until Retire (the leader's, until every
  // rank has done it).
  absl::Status Backpropagate(int microbatch, const BoundaryIn& grad_output,
                             const BoundaryOut& grad_input, bool last_of_step);
  void Retire(int microbatch) { in_flight_.erase(microbatch); }
  // ScaleGrads's checks: floats [begin, end) of the gradient arena that `layers` hold.
  absl::StatusOr<std::pair<int64_t, int64_t>> LayerSpan(LayerRange layers) const;
  // OptimizerStep's checks.
  absl::Status CheckUpdate(int64_t step) const;
  // Stage::GradSumSquaresOf on this process's gradient of step `step` (tensor_shards.h).
  absl::StatusOr<double> GradSumSquaresOf(int64_t step, double downstream, bool split) const;
  // Worker 0's Stage (every worker's has the same layout).
  const Stage& stage() const { return *workers_->at(0).stage; }

 private:
  LocalExecutor(int max_batch, RowSplit rows, TensorReducer* tensor_reducer, bool boundary_payloads,
                std::unique_ptr<WorkerSet> workers);
  const WeightHistory& history() const { return *workers_->at(0).history; }
  // Points worker w's views at the weights microbatch `mb` computes with.
  absl::Status ComposeViews(Worker& w, const InFlight& mb, const char* what);
  // FailedPrecondition naming `call` when a payload reaches a stage without boundary_payloads().
  absl::Status CheckBoundaries(const BoundaryIn& in, const BoundaryOut& out,
                               const char* call) const;
  absl::Status ForwardOnWorker(int w, int microbatch, const InFlight& mb, const BoundaryIn& input,
                               const BoundaryOut& output, const PassOptions& pass);
  absl::Status BackwardOnWorker(int w, int microbatch, const InFlight& mb,
                                const BoundaryIn& grad_output, const BoundaryOut& grad_input,
                                bool last_of_step);
  // The tensor reducer's error after a pass, if any.
  absl::Status TensorStatus() const;

  const RowSplit rows_;
  TensorReducer* const tensor_reducer_;  // Not owned; null without tensor parallelism.
  std::unique_ptr<WorkerSet> workers_;
  std::unique_ptr<GradientBuckets> buckets_;  // Destroyed before the workers.
  LocalState state_;
  std::map<int, InFlight> in_flight_;  // By microbatch.
};

}  // namespace strait::site
