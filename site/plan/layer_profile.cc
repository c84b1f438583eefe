#include "site/plan/layer_profile.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

absl::StatusOr<std::vector<LayerProfile>> ProfileLayers(const ModelSpec& model, LayerRange range,
                                                        const OptimizerSpec& optimizer,
                                                        const StageWorkers& workers,
                                                        const ProfileOptions& o) {
  if (o.microbatch < 1 || o.warmup < 0 || o.repeats < 1) {
    return absl::InvalidArgumentError(absl::StrCat("profile of microbatches of ", o.microbatch,
                                                   " with ", o.repeats, " timed runs"));
  }
  std::vector<LayerProfile> profiles;
  for (int k = range.start; k < range.end; ++k) {
    STRAIT_ASSIGN_OR_RETURN(
        std::unique_ptr<StageExecutor> stage,
        StageExecutor::Create(model, {k, k + 1}, optimizer, o.microbatch, {}, workers));
    const int n = o.microbatch;
    const std::vector<float> input(n * stage->input_features(), 0.0f);
    const std::vector<float> grad_output(stage->is_last() ? 0 : n * stage->output_features(), 1.0f);
    const std::vector<int32_t> labels(static_cast<size_t>(n) * model.TargetsPerSample(), 0);
    std::vector<double> forward, backward;
    for (int run = 0; run < o.warmup + o.repeats; ++run) {
      stage->ZeroGrad();
      auto start = std::chrono::steady_clock::now();
      STRAIT_RETURN_IF_ERROR(stage->Forward(0, 0, n, input.data(), nullptr));
      if (stage->is_last())
        STRAIT_RETURN_IF_ERROR(stage->Loss(0, labels.data(), 1.0f / n).status());
      const double f = Since(start);
      start = std::chrono::steady_clock::now();
      STRAIT_RETURN_IF_ERROR(stage->Backward(0, stage->is_last() ? nullptr : grad_output.data(),
                                             nullptr, /*last_of_step=*/true));
      const double b = Since(start);
      if (run >= o.warmup) {
        forward.push_back(f);
        backward.push_back(b);
      }
    }
    STRAIT_ASSIGN_OR_RETURN(std::vector<float> state, stage->OptimizerState());
    profiles.push_back({.layer = k,
                        .forward_s = Median(forward),
                        .backward_s = Median(backward),
                        .param_bytes = 4 * stage->param_count(),
                        .optimizer_bytes = 4 * static_cast<int64_t>(state.size()),
                        .microbatch_bytes = 4 * stage->floats_per_microbatch()});
  }
  return profiles;
}

}  // namespace strait::site
