// What a training run tells its operator and its scripts (DESIGN.md §8): progress lines on stdout
// ("step N/T  loss X  S samples/s  ETA D") and, at the end, metrics.json. Shared by `strait train`
// (the single-process reference) and strait-site, so that the demo, the tests and `strait bench
// e2e` read the same lines and keys from both.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace strait {

// The figures of one progress line.
struct ProgressFigures {
  int64_t step = 0;             // Steps completed.
  int64_t total = 0;            // Steps of the run.
  std::optional<double> epoch;  // Shown when set (`strait train`).
  std::optional<double> loss;   // Shown when set (a site's stage has a loss only if it is last).
  double samples_per_second = 0;
  double eta_s = 0;
};

// "step %6d/%d[  epoch %.2f][  loss %.4f]  %.0f samples/s  ETA 1m02s" (no newline).
std::string FormatProgressLine(const ProgressFigures& figures);

// The loss of every step of a run, in step order. A rollback replays steps: the losses of the
// replayed steps replace those of the abandoned generation, so a run that recovered reports one
// loss per step, like one that did not.
//
// Not thread-safe: the training thread owns it.
class LossHistory {
 public:
  // The next Add is the loss of step `from` (0-based): forgets the losses of `from` and later. A
  // `from` before the first step kept starts the history over at `from`.
  void Restart(int64_t from);
  void Add(double loss);

  // losses()[i] is the loss of step first_step() + i. first_step() is -1 before the first Restart
  // or Add (an Add before any Restart is the loss of step 0).
  const std::vector<double>& losses() const { return losses_; }
  int64_t first_step() const { return first_step_; }

 private:
  std::vector<double> losses_;
  int64_t first_step_ = -1;
};

// The progress lines and metrics.json of one run. A progress line's samples/s is the rate over the
// steps counted since the previous line (the window), so a line reflects the current speed.
//
// Not thread-safe: the training thread owns it.
class RunReport {
 public:
  using Clock = std::chrono::steady_clock;

  // Lines go to `out` (not owned; must outlive the report), each flushed as it is written (the
  // demo and the tests read them from a pipe or a file while the run goes on).
  RunReport(int64_t total_steps, int global_batch, std::FILE* out = stdout);

  // A step ended: it counts toward the window's rate.
  void CountStep() { ++window_steps_; }
  // Seconds from the window's start to `now`.
  double WindowSeconds(Clock::time_point now) const;
  // Prints the progress line of `step` with the window's samples/s, and `eta_s` (when unset: the
  // time the remaining steps take at the window's rate); then starts a new window at `now`.
  void PrintProgress(int64_t step, std::optional<double> epoch, std::optional<double> loss,
                     std::optional<double> eta_s, Clock::time_point now);
  // Starts a new window at `now` without a line (time spent between, e.g. evaluating, does not
  // count toward the rate).
  void RestartWindow(Clock::time_point now);
  // Prints `line` and a newline, flushed.
  void Print(const std::string& line);

  LossHistory& losses() { return losses_; }
  const LossHistory& losses() const { return losses_; }

  // What metrics.json holds; the run fills it in (keys are the run's: docs/benchmarks.md and the
  // tests read them).
  nlohmann::json& metrics() { return metrics_; }
  // Writes metrics() to `dir`/metrics.json. Blocks on disk I/O. An error names the file.
  absl::Status WriteMetrics(const std::string& dir) const;

 private:
  const int64_t total_steps_;
  const int global_batch_;
  std::FILE* const out_;
  Clock::time_point window_start_;
  int64_t window_steps_ = 0;
  LossHistory losses_;
  nlohmann::json metrics_ = nlohmann::json::object();
};

// Writes `value` (indented by one space, then a newline) to `path`, replacing it. Every step is
// checked: an error (the file cannot be created, the disk is full, the close fails) names `path`.
absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& value);

}  // namespace strait
