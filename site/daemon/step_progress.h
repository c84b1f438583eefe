// A site's progress after each step (DESIGN.md §8): the rate and ETA over the steps trained so far
// go to the figures the gateway's reports carry (SiteProgress), and a progress line to the run's
// report every few seconds and whenever the caller says one is due. For the training thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "core/run_report.h"
#include "site/daemon/site_report_sender.h"

namespace strait::site {

// A step just taken, and the training it ends.
struct StepDone {
  int64_t step = 0;            // Steps completed.
  std::optional<double> loss;  // Of that step (last stage).
  int64_t steps_trained = 0;   // Steps trained so far, replayed ones included.
  double trained_seconds = 0;  // Training time of those steps.
};

class StepProgress {
 public:
  // For a run of `total_steps` of `global_batch` samples. `progress` and `report` must outlive
  // this.
  StepProgress(int64_t total_steps, int global_batch, SiteProgress& progress, RunReport& report);

  // Updates the reports' figures after `done`; prints a progress line when `line_due` or when the
  // last one is a few seconds old.
  void Show(const StepDone& done, bool line_due, std::chrono::steady_clock::time_point now);

 private:
  const int64_t total_steps_;
  const int global_batch_;
  SiteProgress& progress_;
  RunReport& report_;
};

}  // namespace strait::site
