#include "plan/split_costs.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compression/chain_spec.h"
#include "core/model_layout.h"
#include "core/schedule.h"

namespace strait::plan {

double WireRatio(const std::string& chain, int64_t row_width) {
  absl::StatusOr<compression::ChainSpec> parsed = compression::ParseChainSpec(chain);
  if (!parsed.ok()) return 1.0;  // The job spec's parser refused it already.
  double ratio = 1.0;
  for (const compression::StageSpec& stage : parsed->stages) {
    const double block = stage.block_size;
    switch (stage.kind) {
      case compression::StageKind::kProject:
        if (row_width > 0) ratio *= std::min(1.0, stage.subspace / static_cast<double>(row_width));
        break;
      case compression::StageKind::kFp16:
      case compression::StageKind::kBf16:
        ratio *= 0.5;
        break;
      case compression::StageKind::kInt8:  // A byte per value and a float scale per block.
        ratio *= (block + 4) / (4 * block);
        break;
      case compression::StageKind::kInt4:
        ratio *= (block / 2 + 4) / (4 * block);
        break;
      case compression::StageKind::kTopK:  // A float and about two bytes of index per value.
        ratio *= std::min(1.0, stage.fraction * 1.5);
        break;
      case compression::StageKind::kKlt:  // Bits a value measured on the GPT's residual stream.
        ratio *= std::max(1.0, std::log2(1.0 / stage.step) - 0.5) / 32;
        break;
      default:
        break;
    }
  }
  return ratio;
}

std::string RangeText(const LayerRange& r) { return absl::StrCat("[", r.start, ", ", r.end, ")"); }

CostTable::CostTable(const JobSpec& spec, const FederationProfile& profiles) : spec_(spec) {
  const std::vector<LayerLayout> layout = BuildModelLayout(spec.model);
  const int layers = static_cast<int>(layout.size());
  const int sites = static_cast<int>(spec.sites.size());
  const bool two_versions = spec.training.schedule == Schedule::k2BW;
  sum_.assign(sites, std::vector<Sums>(layers + 1));
  for (int s = 0; s < sites; ++s) {
    const SiteProfile& site = *profiles.Site(spec.sites[s].id);
    memory_.push_back(site.memory_bytes);
    for (int k = 0; k < layers; ++k) {
      const LayerProfile& p = site.layers[k];
      Sums next = sum_[s][k];
      next.forward_s += p.forward_s;
      next.backward_s += p.backward_s;
      next.update_s += p.update_s;
      // Weights, their gradient, the optimizer's state, and 2bw's older weights.
      next.state_bytes += (two_versions ? 3 : 2) * p.param_bytes + p.optimizer_bytes;
      next.microbatch_bytes += p.microbatch_bytes;
      sum_[s][k + 1] = next;
    }
    const MeasuredLink* link = profiles.Link(spec.sites[s].id);
    links_.push_back(link == nullptr ? SiteLink{}
                                     : SiteLink{.one_way_delay_s = link->round_trip_s / 2,
                                                .bytes_per_second = link->bytes_per_second});
  }
  const double rows = spec.training.MicrobatchSize();
  for (const LayerLayout& l : layout) out_bytes_.push_back(4.0 * rows * NumElements(l.out_shape));
  for (const LinkSpec& link : spec.links) {
    std::vector<double>& forward = forward_ratio_.emplace_back();
    std::vector<double>& backward = backward_ratio_.emplace_back();
    for (const LayerLayout& l : layout) {
      const int64_t row_width = l.out_shape.empty() ? 0 : l.out_shape.back();
      forward.push_back(WireRatio(link.forward, row_width));
      backward.push_back(WireRatio(link.backward, row_width));
    }
  }
}

SplitPrediction CostTable::Predict(const SplitChoice& choice) const {
  const TrainingSpec& t = spec_.training;
  const int sites = static_cast<int>(choice.layers.size());
  BoundInput in{.schedule = t.schedule,
                .extra_in_flight = choice.extra_in_flight,
                .update = t.update,
                .microbatches = t.microbatches,
                .links = links_,
                .clip = t.grad_clip > 0};
  SplitPrediction p{.choice = choice};
  for (int s = 0; s < sites; ++s) {
    const Sums cost = Of(s, choice.layers[s]);
    in.stages.push_back(
        {.forward_s = cost.forward_s, .backward_s = cost.backward_s, .update_s = cost.update_s});
    p.memory_bytes.push_back(MemoryOf(s, choice.layers[s], choice.extra_in_flight));
    if (s + 1 < sites) {
      const int cut = choice.layers[s].end - 1;
      in.forward_frame_bytes.push_back(out_bytes_[cut] * forward_ratio_[s][cut] +
                                       kFrameOverheadBytes);
      in.backward_frame_bytes.push_back(out_bytes_[cut] * backward_ratio_[s][cut] +
                                        kFrameOverheadBytes);
    }
  }
  p.bound = StepTimeLowerBound(in);
  p.stages = in.stages;
  p.step_s = std::max(p.bound.queued_s, p.bound.link_s);
  p.samples_per_s = p.step_s > 0 ? t.global_batch / p.step_s : 0;
  p.limited_by = LimitOf(in, p);
  return p;
}

bool CostTable::Fits(const SplitPrediction& p) const {
  for (size_t s = 0; s < p.memory_bytes.size(); ++s) {
    if (memory_[s] > 0 && p.memory_bytes[s] > memory_[s]) return false;
  }
  return true;
}

int64_t CostTable::MemoryOf(int s, LayerRange r, int extra_in_flight) const {
  const int sites = static_cast<int>(spec_.sites.size());
  const int held = MaxInFlight(StageSchedule(spec_.training.schedule, sites, s,
                                             spec_.training.microbatches, extra_in_flight));
  const Sums cost = Of(s, r);
  return cost.state_bytes + held * cost.microbatch_bytes;
}

double CostTable::Bottleneck(int s, LayerRange r) const {
  const int m = spec_.training.microbatches;
  const Sums cost = Of(s, r);
  double busy = m * (cost.forward_s + cost.backward_s) + cost.update_s;
  const double rate = links_[s].bytes_per_second;
  if (rate > 0) {
    double up = 0, down = 0;
    if (r.end < static_cast<int>(out_bytes_.size())) {  // To the next site and back.
      up += out_bytes_[r.end - 1] * forward_ratio_[s][r.end - 1];
      down += out_bytes_[r.end - 1] * backward_ratio_[s][r.end - 1];
    }
    if (r.start > 0) {
      up += out_bytes_[r.start - 1] * backward_ratio_[s - 1][r.start - 1];
      down += out_bytes_[r.start - 1] * forward_ratio_[s - 1][r.start - 1];
    }
    busy = std::max(busy, m * std::max(up, down) / rate);
  }
  return busy;
}

CostTable::Sums CostTable::Of(int s, LayerRange r) const {
  const Sums& a = sum_[s][r.start];
  const Sums& b = sum_[s][r.end];
  return {b.forward_s - a.forward_s, b.backward_s - a.backward_s, b.update_s - a.update_s,
          b.state_bytes - a.state_bytes, b.microbatch_bytes - a.microbatch_bytes};
}

std::string CostTable::LimitOf(const BoundInput& in, const SplitPrediction& p) const {
  const StepBound& b = p.bound;
  const int sites = static_cast<int>(in.stages.size());
  if (b.limited_by == "link" || b.limited_by == "bandwidth") {
    int busiest = 0;
    double most = -1;
    for (int s = 0; s < sites; ++s) {
      if (double t = Bottleneck(s, p.choice.layers[s]);
          links_[s].bytes_per_second > 0 && t > most) {
        most = t, busiest = s;
      }
    }
    return absl::StrFormat("the link of %s (%.1f MB/s, %.0f ms round trip)",
                           spec_.sites[busiest].id, links_[busiest].bytes_per_second / 1e6,
                           links_[busiest].one_way_delay_s * 2e3);
  }
  if (b.limited_by == "latency") {
    return absl::StrFormat("link latency: %d crossings on the critical path, %.1f ms per step",
                           b.crossings, b.path_delay_s * 1e3);
  }
  if (b.limited_by == "transfer") {
    return absl::StrFormat("frames on the critical path: %.1f ms of transfer per step",
                           b.path_transfer_s * 1e3);
  }
  int busiest = 0;
  double most = -1;
  for (int s = 0; s < sites; ++s) {
    const double busy = in.microbatches * (in.stages[s].forward_s + in.stages[s].backward_s) +
                        in.stages[s].update_s;
    if (busy > most) most = busy, busiest = s;
  }
  return absl::StrFormat("the compute of %s (layers %s, %.1f ms of work per step)",
                         spec_.sites[busiest].id, RangeText(p.choice.layers[busiest]), most * 1e3);
}

}  // namespace strait::plan
