#include "tools/model_checkpoints.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "core/model_layout.h"
#include "core/status.h"
#include "site/nn/checkpoint.h"

namespace strait::tools {
namespace {

namespace fs = std::filesystem;

// Appends the shard at `path`, which must hold layers `range` of `model`.
absl::Status Append(const ModelSpec& model, const std::string& path, LayerRange range,
                    ModelParams& out) {
  STRAIT_ASSIGN_OR_RETURN(site::CheckpointState state, site::ReadCheckpoint(path));
  if (state.first_layer != range.start || state.end_layer != range.end) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " holds layers [", state.first_layer, ", ", state.end_layer,
                     ") but the job spec gives that site layers [", range.start, ", ", range.end,
                     "); use the job spec the run was trained with"));
  }
  STRAIT_RETURN_IF_ERROR(
      CheckShardParams(model, range, static_cast<int64_t>(state.params.size()), path));
  if (!out.sources.empty() && state.step != out.step) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is of step ", state.step, ", ",
                                                      out.sources.front(), " of step ", out.step));
  }
  out.step = state.step;
  out.params.insert(out.params.end(), state.params.begin(), state.params.end());
  out.sources.push_back(path);
  return absl::OkStatus();
}

// Steps N of the files dir/step-N.ckpt.
std::set<int64_t> StepsIn(const fs::path& dir) {
  std::set<int64_t> steps;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const std::string file = entry.path().filename().string();
    absl::string_view name = file;
    int64_t step = 0;
    if (absl::ConsumePrefix(&name, "step-") && absl::ConsumeSuffix(&name, ".ckpt") &&
        absl::SimpleAtoi(name, &step)) {
      steps.insert(step);
    }
  }
  return steps;
}

}  // namespace

absl::StatusOr<ModelParams> LoadModelParams(const JobSpec& spec, const std::string& dir) {
  ModelParams out;
  const fs::path root(dir);
  if (fs::exists(root / "final.ckpt")) {
    STRAIT_RETURN_IF_ERROR(
        Append(spec.model, (root / "final.ckpt").string(), {0, spec.model.NumLayers()}, out));
    return out;
  }
  bool all_final = true;
  for (const SiteSpec& site : spec.sites) all_final &= fs::exists(root / site.id / "final.ckpt");
  if (all_final) {
    for (const SiteSpec& site : spec.sites) {
      STRAIT_RETURN_IF_ERROR(
          Append(spec.model, (root / site.id / "final.ckpt").string(), site.layers, out));
    }
    return out;
  }
  std::set<int64_t> common;
  for (size_t i = 0; i < spec.sites.size(); ++i) {
    const std::set<int64_t> steps = StepsIn(root / spec.sites[i].id);
    if (i == 0) {
      common = steps;
    } else {
      std::set<int64_t> both;
      std::set_intersection(common.begin(), common.end(), steps.begin(), steps.end(),
                            std::inserter(both, both.begin()));
      common = std::move(both);
    }
  }
  if (common.empty()) {
    return absl::NotFoundError(absl::StrCat(
        dir,
        " holds no checkpoint of this model: expected final.ckpt (strait train --out), "
        "<site>/final.ckpt for every site (strait-site --out, the demo's out/ folder) or "
        "<site>/step-N.ckpt of one step for every site (checkpoint.dir)"));
  }
  const int64_t step = *common.rbegin();
  for (const SiteSpec& site : spec.sites) {
    const fs::path path = root / site.id / absl::StrFormat("step-%08d.ckpt", step);
    STRAIT_RETURN_IF_ERROR(Append(spec.model, path.string(), site.layers, out));
  }
  return out;
}

}  // namespace strait::tools
