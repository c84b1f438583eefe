#include "site/plan/layer_profile.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/cpu_time.h"
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

// Wall and process CPU time summed over the intervals between Start and Stop.
class Clock {
 public:
  void Start() {
    wall_start_ = std::chrono::steady_clock::now();
    cpu_start_ = ProcessCpuSeconds();
  }
  void Stop() {
    wall_ += Since(wall_start_);
    cpu_ += ProcessCpuSeconds() - cpu_start_;
  }
  // The wall time, or under a quota of `cores` the CPU time's pace if that is slower.
  double Seconds(double cores) const { return cores > 0 ? std::max(wall_, cpu_ / cores) : wall_; }

 private:
  std::chrono::steady_clock::time_point wall_start_;
  double cpu_start_ = 0, wall_ = 0, cpu_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<plan::LayerProfile>> ProfileLayers(const ModelSpec& model,
                                                              LayerRange range,
                                                              const OptimizerSpec& optimizer,
                                                              const StageWorkers& workers,
                                                              const ProfileOptions& o) {
  if (o.microbatch < 1 || o.warmup < 0 || o.repeats < 1 || o.min_run_s < 0) {
    return absl::InvalidArgumentError(absl::StrCat("profile of microbatches of ", o.microbatch,
                                                   " with ", o.repeats, " timed runs"));
  }
  std::vector<plan::LayerProfile> profiles;
  for (int k = range.start; k < range.end; ++k) {
    STRAIT_ASSIGN_OR_RETURN(
        std::unique_ptr<StageExecutor> stage,
        StageExecutor::Create(model, {k, k + 1}, optimizer, o.microbatch, o.versioning, workers));
    const int n = o.microbatch;
    const std::vector<float> input(n * stage->input_features(), 0.0f);
    const std::vector<float> grad_output(stage->is_last() ? 0 : n * stage->output_features(), 1.0f);
    // What a stage hands on: every layer's output but the last one's (which computes the loss),
    // and every layer's input gradient but layer 0's (inside a stage or sent upstream, it is
    // computed: one of the three products of a Linear layer's passes).
    std::vector<float> output(grad_output.size());
    std::vector<float> grad_input(stage->is_first() ? 0 : n * stage->input_features());
    const std::vector<int32_t> labels(static_cast<size_t>(n) * model.TargetsPerSample(), 0);
    std::vector<double> forward, backward, update;
    int64_t updates = 0;  // Steps count from 1.
    for (int run = 0; run < o.warmup + o.repeats; ++run) {
      // One timed run: passes until min_run_s has gone by, their mean.
      Clock f, b, u;
      int passes = 0;
      const auto run_start = std::chrono::steady_clock::now();
      do {
        stage->ZeroGrad();
        f.Start();
        STRAIT_RETURN_IF_ERROR(
            stage->Forward(0, 0, n, input.data(), stage->is_last() ? nullptr : output.data()));
        if (stage->is_last())
          STRAIT_RETURN_IF_ERROR(stage->Loss(0, labels.data(), 1.0f / n).status());
        f.Stop();
        b.Start();
        STRAIT_RETURN_IF_ERROR(stage->Backward(0, stage->is_last() ? nullptr : grad_output.data(),
                                               stage->is_first() ? nullptr : grad_input.data(),
                                               /*last_of_step=*/true));
        b.Stop();
        ++passes;
      } while (Since(run_start) < o.min_run_s);
      // The update apart: in a step it runs once after all the passes, and between passes it
      // would evict the weights they read from the caches.
      int steps = 0;
      const auto update_start = std::chrono::steady_clock::now();
      do {
        u.Start();
        STRAIT_RETURN_IF_ERROR(stage->OptimizerStep(++updates, 1.0f));
        u.Stop();
        ++steps;
      } while (Since(update_start) < o.min_run_s / 4);
      if (run >= o.warmup) {
        forward.push_back(f.Seconds(o.cpu_quota_cores) / passes);
        backward.push_back(b.Seconds(o.cpu_quota_cores) / passes);
        update.push_back(u.Seconds(o.cpu_quota_cores) / steps);
      }
    }
    STRAIT_ASSIGN_OR_RETURN(std::vector<float> state, stage->OptimizerState());
    profiles.push_back({.layer = k,
                        .forward_s = Median(forward),
                        .backward_s = Median(backward),
                        .update_s = Median(update),
                        .param_bytes = 4 * stage->param_count(),
                        .optimizer_bytes = 4 * static_cast<int64_t>(state.size()),
                        .microbatch_bytes = stage->bytes_per_microbatch()});
  }
  return profiles;
}

}  // namespace strait::site
