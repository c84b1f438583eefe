#include "plan/split_planner.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compression/chain_spec.h"
#include "core/model_layout.h"
#include "core/schedule.h"
#include "core/status.h"
#include "core/tensor_split.h"
#include "plan/split_costs.h"

namespace strait::plan {
namespace {

// Ways of keeping microbatches in flight that `extra_in_flight: auto` tries beyond the least.
constexpr int kMaxExtraInFlight = 8;

// The ways to place split points: every site's range, in order, pinned ones kept. `visit` gets
// each complete split and returns false to stop; `allowed(s, range)` prunes a site's range.
void ForEachSplit(const JobSpec& spec, const std::function<bool(int, LayerRange)>& allowed,
                  const std::function<bool(const std::vector<LayerRange>&)>& visit) {
  const int sites = static_cast<int>(spec.sites.size());
  const int layers = spec.model.NumLayers();
  // The end of the free run site s's range must leave room in: the next pinned start (or the
  // model's end) minus one layer for each planned site between.
  std::vector<int> last_end(sites);
  int limit = layers;
  for (int s = sites - 1; s >= 0; --s) {
    if (!spec.sites[s].plan_layers) {
      limit = spec.sites[s].layers.start;
      last_end[s] = spec.sites[s].layers.end;
      continue;
    }
    last_end[s] = limit;
    --limit;
  }
  std::vector<LayerRange> split(sites);
  bool go_on = true;
  std::function<void(int, int)> place = [&](int s, int start) {
    if (!go_on) return;
    if (s == sites) {
      go_on = visit(split);
      return;
    }
    const SiteSpec& site = spec.sites[s];
    if (!site.plan_layers) {
      split[s] = site.layers;
      if (allowed(s, site.layers)) place(s + 1, site.layers.end);
      return;
    }
    const bool next_pinned = s + 1 == sites || !spec.sites[s + 1].plan_layers;
    const int from = next_pinned ? last_end[s] : start + 1;
    for (int end = from; end <= last_end[s] && go_on; ++end) {
      split[s] = {start, end};
      if (allowed(s, split[s])) place(s + 1, end);
    }
  };
  place(0, 0);
}

// The least bottleneck (CostTable::Bottleneck's max over sites) any split allows: dynamic
// programming over (site, first layer), exact for that objective.
double LeastBottleneck(const JobSpec& spec, const CostTable& costs,
                       const std::function<bool(int, LayerRange)>& allowed) {
  const int sites = static_cast<int>(spec.sites.size());
  const int layers = spec.model.NumLayers();
  constexpr double kNone = std::numeric_limits<double>::infinity();
  // best[s][k]: the least bottleneck of sites s.. when site s starts at layer k.
  std::vector<std::vector<double>> best(sites + 1, std::vector<double>(layers + 1, kNone));
  best[sites][layers] = 0;
  for (int s = sites - 1; s >= 0; --s) {
    for (int k = 0; k < layers; ++k) {
      const SiteSpec& site = spec.sites[s];
      const int lo = site.plan_layers ? k + 1 : site.layers.end;
      const int hi = site.plan_layers ? layers : site.layers.end;
      if (!site.plan_layers && site.layers.start != k) continue;
      for (int end = lo; end <= hi; ++end) {
        if (best[s + 1][end] == kNone || !allowed(s, {k, end})) continue;
        best[s][k] =
            std::min(best[s][k], std::max(costs.Bottleneck(s, {k, end}), best[s + 1][end]));
      }
    }
  }
  return best[0][0];
}

// The `count` splits of least bottleneck whose every site is `allowed` and within `threshold`,
// least first (ties: lexicographic). Branch and bound: once `count` are held, a site's range
// costlier than the worst of them is not explored.
std::vector<std::vector<LayerRange>> LeastBottleneckSplits(
    const JobSpec& spec, const CostTable& costs,
    const std::function<bool(int, LayerRange)>& allowed, double threshold, int64_t count) {
  using Entry = std::pair<double, std::vector<LayerRange>>;
  const auto lower = [](const Entry& a, const Entry& b) { return a.first < b.first; };
  std::vector<Entry> heap;  // A max-heap: the worst held split on top.
  double bound = threshold;
  ForEachSplit(
      spec, [&](int s, LayerRange r) { return allowed(s, r) && costs.Bottleneck(s, r) <= bound; },
      [&](const std::vector<LayerRange>& split) {
        double worst = 0;
        for (size_t s = 0; s < split.size(); ++s) {
          worst = std::max(worst, costs.Bottleneck(static_cast<int>(s), split[s]));
        }
        if (static_cast<int64_t>(heap.size()) < count) {
          heap.emplace_back(worst, split);
          std::push_heap(heap.begin(), heap.end(), lower);
        } else if (worst < heap.front().first) {
          std::pop_heap(heap.begin(), heap.end(), lower);
          heap.back() = {worst, split};
          std::push_heap(heap.begin(), heap.end(), lower);
        }
        if (static_cast<int64_t>(heap.size()) == count) bound = heap.front().first;
        return true;
      });
  std::sort_heap(heap.begin(), heap.end(), lower);
  std::vector<std::vector<LayerRange>> splits;
  for (Entry& e : heap) splits.push_back(std::move(e.second));
  return splits;
}

// How many contiguous splits the pinned ranges allow, counted by dynamic programming over (site,
// first layer) rather than one by one (100 layers on 8 sites make 1.5e10); at most 2^62.
int64_t CountSplits(const JobSpec& spec) {
  const int sites = static_cast<int>(spec.sites.size());
  const int layers = spec.model.NumLayers();
  constexpr int64_t kMost = int64_t{1} << 62;
  // ways[s][k]: the splits of sites s.. when site s starts at layer k.
  std::vector<std::vector<int64_t>> ways(sites + 1, std::vector<int64_t>(layers + 1, 0));
  ways[sites][layers] = 1;
  for (int s = sites - 1; s >= 0; --s) {
    const SiteSpec& site = spec.sites[s];
    for (int k = 0; k < layers; ++k) {
      if (!site.plan_layers) {
        if (site.layers.start == k) ways[s][k] = ways[s + 1][site.layers.end];
        continue;
      }
      for (int end = k + 1; end <= layers; ++end) {
        ways[s][k] = std::min(kMost, ways[s][k] + ways[s + 1][end]);
      }
    }
  }
  return ways[0][0];
}

// The split's ranges the sites' tensor-parallel layouts can divide.
bool TensorSplitAllows(const JobSpec& spec, int s, LayerRange r) {
  const SiteSpec& site = spec.sites[s];
  return site.tensor_parallel == 1 || CheckTensorSplit(spec.model, r, site.tensor_parallel).ok();
}

// The extra_in_flight values to try: the spec's own, or with auto 0 up to the most that can still
// add a microbatch in flight (a step has M).
std::vector<int> ExtraInFlightChoices(const TrainingSpec& t) {
  if (!t.plan_extra_in_flight) return {t.extra_in_flight};
  if (t.schedule == Schedule::kGPipe) return {0};  // GPipe holds every microbatch already.
  std::vector<int> choices;
  for (int e = 0; e <= std::min(kMaxExtraInFlight, t.microbatches - 1); ++e) choices.push_back(e);
  return choices;
}

// Among `choices` (ascending) for one split, the least extra_in_flight that fits and predicts
// within 1% of the most that fits (more in flight costs memory, and only helps to cover a link's
// round trip). Both searches are binary: memory grows with what is in flight, step time does not.
std::optional<SplitPrediction> BestInFlight(const CostTable& costs,
                                            const std::vector<LayerRange>& split,
                                            const std::vector<int>& choices) {
  int lo = 0, hi = static_cast<int>(choices.size()) - 1;
  std::optional<SplitPrediction> most;
  while (lo <= hi) {  // The most in flight that fits.
    const int mid = (lo + hi + 1) / 2;
    SplitPrediction p = costs.Predict({split, choices[mid]});
    if (costs.Fits(p)) {
      most = std::move(p);
      if (mid == hi) break;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  if (!most) return std::nullopt;
  std::optional<SplitPrediction> least = most;
  lo = 0,
  hi = static_cast<int>(std::find(choices.begin(), choices.end(), most->choice.extra_in_flight) -
                        choices.begin()) -
       1;
  while (lo <= hi) {  // The least in flight as fast.
    const int mid = (lo + hi) / 2;
    SplitPrediction p = costs.Predict({split, choices[mid]});
    if (p.step_s <= most->step_s * 1.01) {
      least = std::move(p);
      hi = mid - 1;
    } else {
      lo = mid + 1;
    }
  }
  return least;
}

// The error when no split fits: the site whose least need (its smallest allowed range, the least
// in flight) is furthest past its memory.
absl::Status NothingFits(const JobSpec& spec, const CostTable& costs) {
  const int layers = spec.model.NumLayers();
  std::string worst;
  double worst_ratio = 0;
  for (size_t s = 0; s < spec.sites.size(); ++s) {
    const SiteSpec& site = spec.sites[s];
    if (costs.memory(s) <= 0) continue;
    int64_t least = std::numeric_limits<int64_t>::max();
    LayerRange at;
    for (int k = 0; k < layers; ++k) {
      LayerRange r = site.plan_layers ? LayerRange{k, k + 1} : site.layers;
      if (int64_t need = costs.MemoryOf(s, r, 0); need < least) least = need, at = r;
    }
    const double ratio = static_cast<double>(least) / costs.memory(s);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = absl::StrFormat(
          "site '%s' has %.1f MiB for its stage, and %s needs %.1f MiB (parameters, gradients, "
          "optimizer state and the microbatches in flight)",
          site.id, costs.memory(s) / 1048576.0,
          site.plan_layers ? absl::StrCat("its smallest share, layers ", RangeText(at))
                           : absl::StrCat("its pinned layers ", RangeText(at)),
          least / 1048576.0);
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "no split of the ", layers, " layers fits the sites' memory",
      worst.empty() ? "" : ": " + worst,
      "; give the sites more memory, a smaller microbatch (more microbatches per step) or more "
      "sites"));
}

}  // namespace

absl::Status CheckProfiles(const JobSpec& spec, const FederationProfile& profiles) {
  const std::string model = ProfiledModel(spec);
  const int layers = spec.model.NumLayers();
  for (const SiteSpec& site : spec.sites) {
    const std::string measure = absl::StrCat("measure it with `strait profile --config ",
                                             spec.source_path, " --site ", site.id, "`");
    const SiteProfile* p = profiles.Site(site.id);
    if (p == nullptr) {
      return absl::NotFoundError(absl::StrCat("no profile of site '", site.id, "'; ", measure));
    }
    if (p->model != model) {
      return absl::FailedPreconditionError(
          absl::StrCat("the profile of site '", site.id, "' was measured for another model (",
                       p->model, "; this job's is ", model, "); ", measure, " again"));
    }
    if (static_cast<int>(p->layers.size()) != layers) {
      return absl::FailedPreconditionError(absl::StrCat("the profile of site '", site.id, "' has ",
                                                        p->layers.size(), " layers, the model ",
                                                        layers, "; ", measure, " again"));
    }
  }
  return absl::OkStatus();
}

namespace {

// OK when `layers` gives each site of `spec` a range, in order, tiling the model.
absl::Status CheckTiling(const JobSpec& spec, const std::vector<LayerRange>& layers) {
  int next = 0;
  for (const LayerRange& r : layers) {
    if (r.start != next || r.end <= r.start) break;
    next = r.end;
  }
  if (layers.size() != spec.sites.size() || next != spec.model.NumLayers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "split ", SplitToString(layers), " does not give each of the ", spec.sites.size(),
        " sites a range of layers 0..", spec.model.NumLayers(), " in order"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SplitPrediction> PredictSplit(const JobSpec& spec, const FederationProfile& profiles,
                                             const SplitChoice& choice) {
  STRAIT_RETURN_IF_ERROR(CheckProfiles(spec, profiles));
  STRAIT_RETURN_IF_ERROR(CheckTiling(spec, choice.layers));
  return CostTable(spec, profiles).Predict(choice);
}

absl::StatusOr<SplitPrediction> PredictPlannedSplit(const JobSpec& spec,
                                                    const FederationProfile& profiles,
                                                    const std::vector<LayerRange>& layers) {
  STRAIT_RETURN_IF_ERROR(CheckProfiles(spec, profiles));
  STRAIT_RETURN_IF_ERROR(CheckTiling(spec, layers));
  std::optional<SplitPrediction> p =
      BestInFlight(CostTable(spec, profiles), layers, ExtraInFlightChoices(spec.training));
  if (!p) {
    return absl::NotFoundError(
        absl::StrCat("split ", SplitToString(layers), " does not fit the sites' memory"));
  }
  return *std::move(p);
}

absl::StatusOr<SplitPlan> PlanSplit(const JobSpec& spec, const FederationProfile& profiles,
                                    const PlanOptions& options) {
  STRAIT_RETURN_IF_ERROR(CheckProfiles(spec, profiles));
  const CostTable costs(spec, profiles);
  SplitPlan plan;
  for (const SiteSpec& site : spec.sites) {
    if (profiles.Link(site.id) == nullptr) {
      plan.notes.push_back(absl::StrCat("no link profile of '", site.id,
                                        "': its link is taken as unlimited with no delay"));
    }
  }
  auto tensor_ok = [&](int s, LayerRange r) { return TensorSplitAllows(spec, s, r); };
  plan.splits = CountSplits(spec);
  const std::vector<int> in_flight = ExtraInFlightChoices(spec.training);
  std::vector<SplitPrediction> fitting;
  auto predict = [&](const std::vector<LayerRange>& split) {
    ++plan.predicted;
    if (std::optional<SplitPrediction> p = BestInFlight(costs, split, in_flight)) {
      fitting.push_back(std::move(*p));
    }
  };
  if (plan.splits <= options.exhaustive_limit) {
    ForEachSplit(spec, tensor_ok, [&](const std::vector<LayerRange>& split) {
      predict(split);
      return true;
    });
  } else {
    const double least = LeastBottleneck(spec, costs, tensor_ok);
    for (const std::vector<LayerRange>& split :
         LeastBottleneckSplits(spec, costs, tensor_ok, least * (1 + options.bottleneck_slack),
                               options.exhaustive_limit)) {
      predict(split);
    }
    plan.notes.push_back(absl::StrFormat(
        "%d splits: predicted the %d of least bottleneck, within %.0f%% of the least possible "
        "(%.1f ms per step)",
        plan.splits, plan.predicted, options.bottleneck_slack * 100, least * 1e3));
  }
  if (fitting.empty()) return NothingFits(spec, costs);
  // Ties (equal predictions) go to the earlier split in lexicographic order: a stable choice.
  std::stable_sort(fitting.begin(), fitting.end(),
                   [](const SplitPrediction& a, const SplitPrediction& b) {
                     return a.step_s < b.step_s * (1 - 1e-9);
                   });
  fitting.resize(std::min<size_t>(fitting.size(), 1 + std::max(options.runner_ups, 0)));
  plan.ranked = std::move(fitting);
  plan.even = BestInFlight(costs, EvenSplit(spec), in_flight);
  return plan;
}

std::vector<std::vector<LayerRange>> ContiguousSplits(const JobSpec& spec, int64_t limit) {
  std::vector<std::vector<LayerRange>> splits;
  ForEachSplit(
      spec, [](int, LayerRange) { return true; },
      [&](const std::vector<LayerRange>& split) {
        splits.push_back(split);
        return static_cast<int64_t>(splits.size()) < limit;
      });
  return splits;
}

std::vector<LayerRange> EvenSplit(const JobSpec& spec) {
  const int sites = static_cast<int>(spec.sites.size());
  std::vector<LayerRange> split(sites);
  int s = 0;
  int start = 0;
  while (s < sites) {
    if (!spec.sites[s].plan_layers) {
      split[s] = spec.sites[s].layers;
      start = split[s].end;
      ++s;
      continue;
    }
    int run_end = s;  // The planned sites s .. run_end - 1 share [start, end).
    while (run_end < sites && spec.sites[run_end].plan_layers) ++run_end;
    const int end = run_end < sites ? spec.sites[run_end].layers.start : spec.model.NumLayers();
    const int n = run_end - s, share = (end - start) / n, more = (end - start) % n;
    for (int i = 0; i < n; ++i, ++s) {
      split[s] = {start, start + share + (i < more ? 1 : 0)};
      start = split[s].end;
    }
  }
  return split;
}

JobView WithSplit(const SplitChoice& choice, int replica) {
  return JobView{.replica = replica, .split = choice.layers, .planned = true};
}

JobSpec WithPlannedInFlight(JobSpec spec, const SplitChoice& choice) {
  spec.training.extra_in_flight = choice.extra_in_flight;
  spec.training.plan_extra_in_flight = false;
  return spec;
}

absl::StatusOr<JobView> ApplySplit(const JobSpec& spec, JobView view,
                                   const std::vector<LayerRange>& layers) {
  int next = 0;
  bool tiles = layers.size() == spec.sites.size();
  for (size_t s = 0; tiles && s < layers.size(); ++s) {
    tiles = layers[s].start == next && layers[s].end > layers[s].start;
    next = layers[s].end;
  }
  if (!tiles || next != spec.model.NumLayers()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the split ", SplitToString(layers), " does not give the model's ", spec.model.NumLayers(),
        " layers in order to the ", spec.sites.size(), " sites"));
  }
  view.split = layers;
  return view;
}

std::string SplitToString(const std::vector<LayerRange>& layers) {
  std::string text;
  for (const LayerRange& r : layers) absl::StrAppend(&text, text.empty() ? "" : " ", RangeText(r));
  return text;
}

std::vector<std::string> DescribePlan(const JobSpec& spec, const SplitPlan& plan) {
  std::vector<std::string> lines;
  const SplitPrediction& best = plan.ranked.front();
  lines.push_back(absl::StrFormat(
      "planned split %s, extra_in_flight %d: %.1f ms per step, %.0f samples/s predicted",
      SplitToString(best.choice.layers), best.choice.extra_in_flight, best.step_s * 1e3,
      best.samples_per_s));
  for (size_t s = 0; s < spec.sites.size(); ++s) {
    lines.push_back(absl::StrFormat("  %-12s layers %-9s %.1f MiB", spec.sites[s].id,
                                    RangeText(best.choice.layers[s]),
                                    best.memory_bytes[s] / 1048576.0));
  }
  lines.push_back("  bounded by " + best.limited_by);
  for (size_t i = 1; i < plan.ranked.size(); ++i) {
    const SplitPrediction& p = plan.ranked[i];
    lines.push_back(absl::StrFormat("runner-up %d: %s, extra_in_flight %d: %.1f ms, %.0f samples/s",
                                    i, SplitToString(p.choice.layers), p.choice.extra_in_flight,
                                    p.step_s * 1e3, p.samples_per_s));
  }
  if (plan.even) {
    lines.push_back(
        absl::StrFormat("even split %s: %.1f ms, %.0f samples/s (the plan is %.2fx faster)",
                        SplitToString(plan.even->choice.layers), plan.even->step_s * 1e3,
                        plan.even->samples_per_s, plan.even->step_s / best.step_s));
  } else {
    lines.push_back(absl::StrCat("even split ", SplitToString(EvenSplit(spec)),
                                 ": does not fit the sites' memory"));
  }
  lines.push_back(
      absl::StrFormat("%d of %d contiguous splits predicted", plan.predicted, plan.splits));
  for (const std::string& note : plan.notes) lines.push_back("note: " + note);
  return lines;
}

}  // namespace strait::plan
