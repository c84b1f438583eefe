// The split planner (DESIGN.md §4 `layers: auto`, issue 30): which contiguous layers each site
// runs, and how many microbatches stage 0 keeps in flight, so that a step takes least time.
//
// A split is judged by the step time the schedule's model predicts (plan/step_time_bound.h) from
// the sites' measured per-layer costs and their links (plan/site_profile.h): each stage's forward,
// backward and update summed over its layers, each boundary's frame its activations' bytes through
// the link's codec chain. The prediction is the model's period with links that queue frames, or the
// busiest link with the latency it cannot overlap, whichever is longer. A split must fit each
// site's memory: parameters, gradients, optimizer state, the schedule's second weight version
// (2bw) and the microbatches the schedule holds in flight.
//
// The search is exact while the contiguous splits the pinned ranges allow number at most
// PlanOptions::exhaustive_limit: every one is predicted. Beyond, dynamic programming over split
// points finds the least possible bottleneck (the slowest stage's compute or busiest link's bytes
// per step, which the step cannot beat), and of the splits whose bottleneck is within
// PlanOptions::bottleneck_slack of it, the exhaustive_limit of least bottleneck (found by branch
// and bound) are predicted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "core/job_view.h"
#include "plan/site_profile.h"
#include "plan/step_time_bound.h"

namespace strait::plan {

struct SplitChoice {
  std::vector<LayerRange> layers;  // One range per site, in pipeline order, tiling the model.
  int extra_in_flight = 0;
  bool operator==(const SplitChoice&) const = default;
};

struct SplitPrediction {
  SplitChoice choice;
  StepBound bound;
  double step_s = 0;  // Predicted time of one step.
  double samples_per_s = 0;
  std::string limited_by;  // What bounds it, for people: "compute of dc-b (layers [2, 5))".
  std::vector<int64_t> memory_bytes;  // What each site needs.
  std::vector<StageCost> stages;      // Each site's compute, summed over its layers' profiles.
};

struct PlanOptions {
  int runner_ups = 3;               // Next-best splits reported beside the chosen one.
  int64_t exhaustive_limit = 1000;  // Splits predicted one by one before the search prunes.
  double bottleneck_slack = 0.25;   // Pruned search: splits within this share of the least.
};

struct SplitPlan {
  std::vector<SplitPrediction> ranked;  // The chosen split first, then the runner-ups.
  std::optional<SplitPrediction> even;  // The even split, where it fits, for comparison.
  int64_t splits = 0;                   // Contiguous splits the pinned ranges allow.
  int64_t predicted = 0;                // Of them, how many were predicted.
  std::vector<std::string> notes;       // Assumptions made, e.g. a link without a profile.
};

// Checks that `profiles` has a profile of the job's model (ProfiledModel) with every layer for
// every site of `spec`; the error names the site and the command that measures it.
absl::Status CheckProfiles(const JobSpec& spec, const FederationProfile& profiles);

// The prediction for one split. `choice` must tile the model with one range per site.
absl::StatusOr<SplitPrediction> PredictSplit(const JobSpec& spec, const FederationProfile& profiles,
                                             const SplitChoice& choice);

// The prediction for `layers` with extra_in_flight as the planner chooses it: the spec's, or with
// `extra_in_flight: auto` the least that predicts as fast as the most that fits. NotFound when no
// choice fits the sites' memory.
absl::StatusOr<SplitPrediction> PredictPlannedSplit(const JobSpec& spec,
                                                    const FederationProfile& profiles,
                                                    const std::vector<LayerRange>& layers);

// The best split for `spec` (its pinned ranges kept; extra_in_flight chosen when the spec says
// `extra_in_flight: auto`, else the spec's), with runner-ups. Errors name the site and what to
// change: missing or foreign profiles, or no split that fits the sites' memory.
absl::StatusOr<SplitPlan> PlanSplit(const JobSpec& spec, const FederationProfile& profiles,
                                    const PlanOptions& options = {});

// Every contiguous split that `spec`'s pinned ranges allow (at most `limit`, in lexicographic order
// of split points), and the even one: each gap between pins shared out as evenly as it divides,
// the first sites of a gap taking one more layer.
std::vector<std::vector<LayerRange>> ContiguousSplits(const JobSpec& spec, int64_t limit);
std::vector<LayerRange> EvenSplit(const JobSpec& spec);

// The view of `replica` with `choice`'s ranges as its split, planned: what the sites run.
JobView WithSplit(const SplitChoice& choice, int replica = 0);

// `spec` with `choice`'s extra_in_flight set (no longer `auto`). Settled once, when the spec is
// loaded and the split first planned (a re-plan keeps it), so the spec stays immutable after.
JobSpec WithPlannedInFlight(JobSpec spec, const SplitChoice& choice);

// `view` (whose split was planned) with the ranges `layers`, as a re-plan gives them (proto
// Rollback.split). InvalidArgument when they do not tile `spec`'s model in stage order, a range
// per site.
absl::StatusOr<JobView> ApplySplit(const JobSpec& spec, JobView view,
                                   const std::vector<LayerRange>& layers);

// "[0, 2) [2, 5) [5, 6)"
std::string SplitToString(const std::vector<LayerRange>& layers);

// The plan for people: the chosen split per site, predicted step time and samples/s, what bounds
// it, the runner-ups and the even split; one line per fact (the gateway logs each line).
std::vector<std::string> DescribePlan(const JobSpec& spec, const SplitPlan& plan);

}  // namespace strait::plan
