// The sites, links and the checks that span sections of a job spec (core/job_spec_parser.h).
#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "compression/chain_spec.h"
#include "compression/seeded_basis.h"
#include "core/frame_header.h"
#include "core/job_spec.h"
#include "core/job_spec_parser.h"
#include "core/model_layout.h"
#include "core/status.h"
#include "core/tensor_split.h"
#include "core/yaml_reader.h"

namespace strait::job_spec_internal {
namespace {

// "proj:112", with ":SEED" when it is not the default; the chain as written without proj.
std::string ProjectText(const compression::StageSpec* proj, const std::string& chain) {
  if (proj == nullptr) return chain;
  return absl::StrCat("proj:", proj->subspace,
                      proj->basis_seed == compression::kDefaultBasisSeed
                          ? ""
                          : absl::StrCat(":", proj->basis_seed));
}

// A link with proj (docs/notes/activation-subspace.md). The gradient of X U U^T is delta U U^T: it
// must go back through the forward's subspace, so both directions project with the same K and seed.
// K must be below the boundary's width when the split is known (with layers: auto the planner
// places the boundary; the codec refuses a row narrower than K when it encodes).
absl::Status CheckProjectLink(YamlMap& map, const JobSpec& spec, const LinkSpec& link) {
  const compression::ChainSpec forward = *compression::ParseChainSpec(link.forward);
  const compression::ChainSpec backward = *compression::ParseChainSpec(link.backward);
  const compression::StageSpec* f = compression::FindProject(forward);
  const compression::StageSpec* b = compression::FindProject(backward);
  if (f == nullptr && b == nullptr) return absl::OkStatus();
  if (f == nullptr || b == nullptr || f->subspace != b->subspace ||
      f->basis_seed != b->basis_seed) {
    return map.ErrorAt("backward",
                       absl::StrCat("forward ", ProjectText(f, link.forward), " and backward ",
                                    ProjectText(b, link.backward),
                                    " differ: the gradient must travel in the forward's subspace"));
  }
  const SiteSpec& upstream = spec.sites[link.boundary];
  if (upstream.plan_layers) return absl::OkStatus();
  const int64_t width = BuildModelLayout(spec.model)[upstream.layers.end - 1].out_shape.back();
  const int64_t k = f->subspace;
  if (k >= width) {
    return map.ErrorAt("forward", absl::StrCat("proj:", k, " on boundary ", link.boundary,
                                               " of width ", width, ": K must be below the width"));
  }
  if (static_cast<uint64_t>(width * k) > compression::kMaxBasisElements) {
    return map.ErrorAt("forward", absl::StrCat("proj:", k, " on boundary ", link.boundary,
                                               " of width ", width, " needs a basis of ", width * k,
                                               " values, above the codec's limit of ",
                                               compression::kMaxBasisElements));
  }
  return absl::OkStatus();
}

// A link with klt codes rows of the boundary's width, at most compression::kMaxKltWidth (its basis
// is width^2 values). With layers: auto the codec refuses a wider row when it encodes. `fisher`
// shapes the forward's noise by the gradients the backward brings: a backward has none to use.
absl::Status CheckKltLink(YamlMap& map, const JobSpec& spec, const LinkSpec& link) {
  if (compression::ParseChainSpec(link.backward)->stages[0].fisher) {
    return map.ErrorAt("backward", absl::StrCat(link.backward,
                                                ": 'fisher' is the forward's option (it shapes "
                                                "the activations' noise by the gradients that "
                                                "come back); give the backward klt:STEP:sr"));
  }
  const SiteSpec& upstream = spec.sites[link.boundary];
  if (upstream.plan_layers) return absl::OkStatus();
  for (auto [key, chain] : {std::pair{"forward", &link.forward}, {"backward", &link.backward}}) {
    if (compression::ParseChainSpec(*chain)->stages[0].kind != compression::StageKind::kKlt) {
      continue;
    }
    const int64_t width = BuildModelLayout(spec.model)[upstream.layers.end - 1].out_shape.back();
    if (static_cast<uint64_t>(width) > compression::kMaxKltWidth) {
      return map.ErrorAt(
          key, absl::StrCat(*chain, " on boundary ", link.boundary, " of width ", width,
                            ": klt codes rows of at most ", compression::kMaxKltWidth, " values"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int JobSpecParser::LargestDivisorAtMost(int n, int limit) {
  for (int d = limit; d > 1; --d) {
    if (n % d == 0) return d;
  }
  return 1;
}

absl::Status JobSpecParser::ParseSites(YamlMap& root) {
  YAML::Node sites = root.Get("sites");
  if (!sites.IsDefined() || sites.IsNull()) {
    return root.Missing("sites", "a list of sites, each with id and layers: [start, end)");
  }
  if (!sites.IsSequence() || sites.size() == 0) {
    return root.ErrorAt("sites",
                        "expected a non-empty list of sites, found " + DescribeYamlNode(sites));
  }
  if (sites.size() > kMaxSites) {
    return root.ErrorAt("sites",
                        absl::StrCat("at most ", kMaxSites, " sites, found ", sites.size()));
  }
  const int num_layers = spec_.model.NumLayers();
  std::vector<YAML::Node> layer_nodes, tensor_nodes;
  for (size_t i = 0; i < sites.size(); ++i) {
    YamlMap map(file_, sites[i], absl::StrCat("sites[", i, "]"));
    STRAIT_RETURN_IF_ERROR(map.status());
    if (!sites[i].IsMap()) {
      return YamlError(file_, sites[i], map.path(),
                       "expected a mapping with id and layers, found nothing");
    }
    SiteSpec site;
    STRAIT_RETURN_IF_ERROR(map.String("id", &site.id, /*required=*/true));
    if (!IsSiteId(site.id)) {
      return map.ErrorAt("id",
                         "expected 1-63 lower-case letters, digits, '.', '_' or '-' (it names "
                         "the site's certificate and files), found '" +
                             site.id + "'");
    }
    if (int other = spec_.SiteIndex(site.id); other >= 0) {
      return map.ErrorAt("id", absl::StrCat("duplicate site id '", site.id, "' (also sites[", other,
                                            "]); site ids must be unique"));
    }
    if (map.Has("layers") && map.Get("layers").IsScalar() && map.Get("layers").Scalar() == "auto") {
      site.plan_layers = true;  // The split planner assigns its range (plan/split_planner.h).
    } else {
      std::vector<int> range;
      STRAIT_RETURN_IF_ERROR(map.IntList("layers", 0, 1 << 20, 2, &range, /*required=*/true));
      site.layers = {range[0], range[1]};
    }
    layer_nodes.push_back(map.Get("layers"));
    STRAIT_RETURN_IF_ERROR(
        map.Enum("device", {{"cpu", DeviceKind::kCpu}, {"cuda", DeviceKind::kCuda}}, &site.device));
    STRAIT_RETURN_IF_ERROR(map.Int("workers", 1, kMaxWorkers, &site.workers));
    STRAIT_RETURN_IF_ERROR(map.Int("machines", 1, kMaxMachines, &site.machines));
    STRAIT_RETURN_IF_ERROR(map.Int("tensor_parallel", 1, kMaxMachines, &site.tensor_parallel));
    tensor_nodes.push_back(map.Get("tensor_parallel"));
    STRAIT_RETURN_IF_ERROR(CheckSiteLayout(map, site));
    STRAIT_RETURN_IF_ERROR(Finish(map));
    spec_.sites.push_back(std::move(site));
  }
  STRAIT_RETURN_IF_ERROR(CheckLayerSplit(layer_nodes, num_layers));
  for (size_t i = 0; spec_.PlansSplit() && i < spec_.sites.size(); ++i) {
    if (spec_.sites[i].machines > 1) {
      return YamlError(file_, layer_nodes[i], absl::StrCat("sites[", i, "].layers"),
                       absl::StrCat("layers: auto plans sites of one machine each; site '",
                                    spec_.sites[i].id, "' has ", spec_.sites[i].machines,
                                    ": pin every site's layers, or run it on one machine"));
    }
  }
  if (spec_.training.plan_extra_in_flight && !spec_.PlansSplit()) {
    return YamlError(file_, extra_in_flight_node_, "training.extra_in_flight",
                     "auto is chosen by the split planner, which runs only when some site has "
                     "layers: auto; give a number instead (0 by default)");
  }
  // With the ranges known good: every split dimension of a tensor-parallel site divides (the
  // planner checks the ranges it gives).
  for (size_t i = 0; i < spec_.sites.size(); ++i) {
    const SiteSpec& site = spec_.sites[i];
    if (site.plan_layers) continue;
    if (absl::Status s = CheckTensorSplit(spec_.model, site.layers, site.tensor_parallel);
        !s.ok()) {
      return YamlError(file_, tensor_nodes[i], absl::StrCat("sites[", i, "].tensor_parallel"),
                       std::string(s.message()));
    }
  }
  return absl::OkStatus();
}

// How a site's machines and workers divide a microbatch and its layers (the model's sizes are
// checked once the layer ranges are known good).
absl::Status JobSpecParser::CheckSiteLayout(YamlMap& map, const SiteSpec& site) {
  if (site.machines % site.tensor_parallel != 0) {
    return map.ErrorAt(
        "tensor_parallel",
        absl::StrCat("machines: ", site.machines, " is not a multiple of ", site.tensor_parallel,
                     " (machines = tensor_parallel x data-parallel replicas)"));
  }
  if (site.tensor_parallel > 1 && (site.workers != 1 || site.device != DeviceKind::kCpu)) {
    return map.ErrorAt("tensor_parallel",
                       "tensor parallelism runs on CPU ranks of one worker each: set device: "
                       "cpu and workers: 1 (give each rank its threads with strait-site "
                       "--threads)");
  }
  const int microbatch = spec_.training.MicrobatchSize();
  if (site.workers > microbatch) {
    return map.ErrorAt(
        "workers", absl::StrCat(site.workers, " workers cannot share a microbatch of ", microbatch,
                                " samples; use at most that many workers"));
  }
  if (site.parts() > microbatch) {
    return map.ErrorAt("machines",
                       absl::StrCat(site.data_parallel(), " data-parallel ranks x ", site.workers,
                                    " workers cannot share a microbatch of ", microbatch,
                                    " samples; use fewer machines or workers"));
  }
  return absl::OkStatus();
}

// The sites' ranges, in order, must tile [0, num_layers) exactly. Sites with layers: auto take
// what the pinned ranges leave, at least one layer each.
absl::Status JobSpecParser::CheckLayerSplit(const std::vector<YAML::Node>& nodes, int num_layers) {
  auto range = [](const LayerRange& r) { return absl::StrCat("[", r.start, ", ", r.end, ")"); };
  const std::string rule =
      absl::StrCat("ranges must be contiguous and cover layers 0..", num_layers, " (the ",
                   ToString(spec_.model.family), " model has ", num_layers, " layers)");
  int next = 0;          // The first layer no earlier site holds.
  int planned = 0;       // Sites with layers: auto since the last pinned range.
  std::string previous;  // The last pinned range, for messages.
  // The `planned` sites before sites[i] (pinned at `end`; i past the last site: the model's
  // end) share [next, end): at least a layer each.
  auto check_gap = [&](int end, size_t i) -> absl::Status {
    if (end - next >= planned) return absl::OkStatus();
    const size_t at = std::min(i, spec_.sites.size() - 1);
    return YamlError(
        file_, nodes[at], absl::StrCat("sites[", at, "].layers"),
        absl::StrCat(planned, " site(s) with layers: auto before it (the last is '",
                     spec_.sites[i - 1].id, "') get no layers: the pinned ranges leave only [",
                     next, ", ", end, ")", previous.empty() ? "" : " after " + previous,
                     "; pin fewer layers or give those sites ranges"));
  };
  for (size_t i = 0; i < spec_.sites.size(); ++i) {
    const SiteSpec& site = spec_.sites[i];
    if (site.plan_layers) {
      ++planned;
      continue;
    }
    const LayerRange& r = site.layers;
    std::string path = absl::StrCat("sites[", i, "].layers");
    if (r.start >= r.end) {
      return YamlError(
          file_, nodes[i], path,
          absl::StrCat("range ", range(r), " is empty; a site needs at least one layer"));
    }
    if (r.end > num_layers) {
      return YamlError(file_, nodes[i], path,
                       absl::StrCat("range ", range(r), " goes past the last layer; ", rule));
    }
    if (r.start < next) {
      return YamlError(file_, nodes[i], path,
                       absl::StrCat("range ", range(r), " overlaps ", previous, "; ", rule));
    }
    if (r.start > next && planned == 0) {
      return YamlError(file_, nodes[i], path,
                       absl::StrCat("range ", range(r), " leaves layers [", next, ", ", r.start,
                                    ") to no site; ", rule));
    }
    STRAIT_RETURN_IF_ERROR(check_gap(r.start, i));
    next = r.end;
    planned = 0;
    previous = absl::StrCat("sites[", i, "] ", range(r));
  }
  const size_t last = spec_.sites.size() - 1;
  if (planned == 0 && next != num_layers) {
    return YamlError(file_, nodes.back(), absl::StrCat("sites[", last, "].layers"),
                     absl::StrCat("range ", range(spec_.sites.back().layers), " leaves layers [",
                                  next, ", ", num_layers, ") to no site; ", rule));
  }
  return check_gap(num_layers, last + 1);
}

absl::Status JobSpecParser::ParseLinks(YamlMap& root) {
  const size_t boundaries = spec_.sites.size() - 1;
  spec_.links.resize(boundaries);
  for (size_t b = 0; b < boundaries; ++b) spec_.links[b].boundary = static_cast<int>(b);
  YAML::Node links = root.Get("links");
  if (!links.IsDefined() || links.IsNull()) return absl::OkStatus();
  if (!links.IsSequence()) {
    return root.ErrorAt("links",
                        "expected a list of links, each with between: [site, next site], found " +
                            DescribeYamlNode(links));
  }
  std::vector<bool> seen(boundaries, false);
  for (size_t i = 0; i < links.size(); ++i) {
    YamlMap map(file_, links[i], absl::StrCat("links[", i, "]"));
    STRAIT_RETURN_IF_ERROR(map.status());
    YAML::Node between = map.Get("between");
    if (!between.IsDefined()) return map.Missing("between", "[site id, id of the next site]");
    std::string a, b;
    if (!between.IsSequence() || between.size() != 2 || !between[0].IsScalar() ||
        !between[1].IsScalar()) {
      return map.ErrorAt("between", "expected two site ids such as [dc-a, dc-b], found " +
                                        DescribeYamlNode(between));
    }
    a = between[0].Scalar(), b = between[1].Scalar();
    int ia = spec_.SiteIndex(a), ib = spec_.SiteIndex(b);
    if (ia < 0 || ib < 0) {
      return map.ErrorAt(
          "between", absl::StrCat("unknown site '", ia < 0 ? a : b, "'; sites are ", SiteList()));
    }
    if (ib != ia + 1) {
      return map.ErrorAt(
          "between",
          absl::StrCat("sites '", a, "' and '", b,
                       "' are not neighbours in stage order; a link joins "
                       "sites[i] and sites[i+1], e.g. [",
                       spec_.sites[0].id, ", ", spec_.sites[1 % spec_.sites.size()].id, "]"));
    }
    if (seen[ia]) {
      return map.ErrorAt("between", absl::StrCat("a second link between '", a, "' and '", b,
                                                 "'; describe each boundary once"));
    }
    seen[ia] = true;
    LinkSpec& link = spec_.links[ia];
    for (auto [key, chain] : {std::pair{"forward", &link.forward}, {"backward", &link.backward}}) {
      STRAIT_RETURN_IF_ERROR(map.String(key, chain));
      if (auto parsed = compression::ParseChainSpec(*chain); !parsed.ok()) {
        return map.ErrorAt(key, std::string(parsed.status().message()));
      }
    }
    STRAIT_RETURN_IF_ERROR(CheckProjectLink(map, spec_, link));
    STRAIT_RETURN_IF_ERROR(CheckKltLink(map, spec_, link));
    STRAIT_RETURN_IF_ERROR(map.Bool("encryption", &link.encryption));
    STRAIT_RETURN_IF_ERROR(map.Bytes("rotate_bytes", 1 << 20, &link.rotate_bytes));
    STRAIT_RETURN_IF_ERROR(Finish(map));
  }
  return absl::OkStatus();
}

// 2bw keeps a stage's in-flight microbatches apart by their index within a step: stage s holds at
// most S - s of them, consecutive across a step boundary, so they are distinct only when M >= S.
absl::Status JobSpecParser::CheckSchedule(YamlMap& root) {
  const TrainingSpec& t = spec_.training;
  const int stages = static_cast<int>(spec_.sites.size());
  if (t.schedule != Schedule::k2BW || t.microbatches >= stages) return absl::OkStatus();
  YamlMap training = Section(root, "training");
  return training.ErrorAt(
      "microbatches",
      absl::StrCat("schedule 2bw needs at least as many microbatches as sites (", stages,
                   "), found ", t.microbatches,
                   ": the pipeline holds up to that many microbatches across a step boundary and "
                   "tells them apart by their index within the step; raise microbatches or use "
                   "schedule 1f1b"));
}

// The gateway's budget must hold at least one frame, or a producer could never push.
absl::Status JobSpecParser::CheckMemoryBudget(YamlMap& root) {
  const uint64_t frame = MaxFrameWireBytes(spec_);
  if (spec_.gateway.memory_budget >= frame) return absl::OkStatus();
  YamlMap gateway = Section(root, "gateway");
  return gateway.ErrorAt("memory_budget",
                         absl::StrCat("a budget of ", spec_.gateway.memory_budget,
                                      " bytes cannot hold one frame of this job (up to ", frame,
                                      " bytes: one microbatch of activations",
                                      spec_.PlansSplit() ? ", or with layers: auto the state of "
                                                           "every layer, which may move after a "
                                                           "re-plan,"
                                                         : "",
                                      " plus codec and sealing overhead); raise it to at least ",
                                      (frame + (1 << 20) - 1) >> 20, "MiB"));
}

std::string JobSpecParser::SiteList() const {
  std::string out;
  for (const SiteSpec& s : spec_.sites) out += (out.empty() ? "" : ", ") + s.id;
  return out;
}

}  // namespace strait::job_spec_internal
