// The costs the split planner predicts a split from (plan/split_planner.h), gathered once per job:
// per site, prefix sums over the layers of its profile; per boundary, the bytes of a frame cut
// after each layer and the share of them its codec chains send. Internal to plan/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/job_spec.h"
#include "plan/site_profile.h"
#include "plan/split_planner.h"
#include "plan/step_time_bound.h"

namespace strait::plan {

// Frame header, codec header and AEAD tag around a tensor's bytes (an upper estimate).
inline constexpr double kFrameOverheadBytes = 128;

// The share of fp32 bytes a codec chain sends for a frame of rows of `row_width` values (what
// proj:K keeps of a row: K of them; 0, unknown: proj counts as 1). Lossless byte stages (shuffle,
// zstd) count as 1: what they save depends on the values, and a plan must not count on it.
double WireRatio(const std::string& chain, int64_t row_width = 0);

// "[start, end)".
std::string RangeText(const LayerRange& r);

class CostTable {
 public:
  CostTable(const JobSpec& spec, const FederationProfile& profiles);

  // Step time and memory of `choice`.
  SplitPrediction Predict(const SplitChoice& choice) const;
  // True when every site of `choice` has the memory it needs.
  bool Fits(const SplitPrediction& p) const;
  int64_t MemoryOf(int s, LayerRange r, int extra_in_flight) const;
  int64_t memory(int s) const { return memory_[s]; }
  // A lower bound on the step time of any split giving site s layers `r`: its compute, and the
  // bytes its link carries for the frames at r's edges (lossless bandwidth share of the step).
  double Bottleneck(int s, LayerRange r) const;

 private:
  struct Sums {
    double forward_s = 0, backward_s = 0, update_s = 0;
    int64_t state_bytes = 0, microbatch_bytes = 0;
  };
  Sums Of(int s, LayerRange r) const;
  std::string LimitOf(const BoundInput& in, const SplitPrediction& p) const;

  const JobSpec& spec_;
  std::vector<std::vector<Sums>> sum_;  // [site][k]: layers [0, k) on that site.
  std::vector<int64_t> memory_;
  std::vector<SiteLink> links_;
  std::vector<double> out_bytes_;  // fp32 bytes of one microbatch's output of each layer.
  // Per boundary, then per layer that may end the stage before it (the frame's row width).
  std::vector<std::vector<double>> forward_ratio_, backward_ratio_;
};

}  // namespace strait::plan
