// The means over a stage's replicas (JobSpec::replicas), through the gateway's secure sum
// (DESIGN.md §5): each replica quantises its vector to fixed point (site/exchange/masked_sum.h),
// adds its pairwise masks of the round, sends it as SUM frames and takes back the sum, in which the
// masks cancel. With training.sync every_step, at kClipNorm before the clipping norm, the stage's
// gradient becomes the mean of its replicas' (AverageGrads), so every replica takes the update of
// one pipeline with R times the batch; OuterRounds averages its pseudo-gradients through Mean.
//
// Called by SiteRunner at step end, on the training thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "site/exchange/masked_sum.h"
#include "site/pipeline/stage_executor.h"
#include "site/pipeline/stage_frames.h"

namespace strait::site {

// A sum sent and not yet taken back (ReplicaMeans::Start, Finish).
struct PendingSum {
  SumFormat format;
  size_t count = 0;  // Values (the sum's words hold MaskedCount of them).
  v1::TensorKey back;
  std::chrono::steady_clock::time_point sent;
};

class ReplicaMeans {
 public:
  // `frames` and `stage` must outlive this.
  ReplicaMeans(StageFrames& frames, StageExecutor& stage);

  // kClipNorm with replicas summing every step: the gradient of `step` becomes the replicas' mean.
  // A no-op otherwise.
  absl::Status AverageGrads(int64_t step);

  // The mean of `values` over this stage's replicas: fixed point of `format`, masked, summed, back
  // to floats / R. `round` names it among all rounds of `what` in the run (its masks must never
  // repeat). `own`, if given, receives what this replica's share stands for after quantisation.
  // FAILED_PRECONDITION without the links of the sums.
  absl::StatusOr<std::vector<float>> Mean(const std::string& what, int64_t round,
                                          std::span<const float> values, const SumFormat& format,
                                          std::vector<float>* own = nullptr);

  // Mean in two halves, so that compute can run while the sum is out: Start quantises, masks and
  // sends; Finish waits for the sum (its wait counts as Timer::kWait) and returns the mean.
  absl::StatusOr<PendingSum> Start(const std::string& what, int64_t round,
                                   std::span<const float> values, const SumFormat& format,
                                   std::vector<float>* own = nullptr);
  absl::StatusOr<std::vector<float>> Finish(const PendingSum& pending);

 private:
  StageFrames& frames_;
  StageExecutor& stage_;
  int64_t clamped_ = 0;  // Values the sums clamped to the fixed point's range (warned once).
};

}  // namespace strait::site
