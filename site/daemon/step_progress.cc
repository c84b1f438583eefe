#include "site/daemon/step_progress.h"

#include <algorithm>
#include <mutex>

namespace strait::site {
namespace {

// Seconds between progress lines (more often where the caller says one is due).
constexpr double kProgressInterval = 2.0;

}  // namespace

StepProgress::StepProgress(int64_t total_steps, int global_batch, SiteProgress& progress,
                           RunReport& report)
    : total_steps_(total_steps),
      global_batch_(global_batch),
      progress_(progress),
      report_(report) {}

void StepProgress::Show(const StepDone& done, bool line_due,
                        std::chrono::steady_clock::time_point now) {
  const double rate = static_cast<double>(done.steps_trained) * global_batch_ /
                      std::max(done.trained_seconds, 1e-9);
  const double eta_s =
      static_cast<double>(total_steps_ - done.step) * global_batch_ / std::max(rate, 1e-9);
  {
    std::lock_guard<std::mutex> lock(progress_.mu);
    progress_.step = done.step;
    progress_.loss = done.loss;
    progress_.samples_per_second = rate;
    progress_.eta_s = eta_s;
  }
  if (line_due || report_.WindowSeconds(now) >= kProgressInterval) {
    report_.PrintProgress(done.step, std::nullopt, done.loss, eta_s, now);
  }
}

}  // namespace strait::site
