// The site's reports to the gateway (DESIGN.md §8): progress (step, loss, samples/s, ETA, the
// newest checkpoint) and where the time and the bytes went, for the dashboard and for the gateway's
// view of which checkpoint every site holds.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "site/pipeline/site_metrics.h"
#include "strait/v1/gateway.pb.h"

namespace strait::site {

// What the progress lines and the reports share. The training thread writes it; the sender's
// thread reads it. Guarded by `mu`.
struct SiteProgress {
  std::mutex mu;
  int64_t step = 0;
  uint32_t generation = 0;
  std::optional<int64_t> checkpoint;  // Newest checkpoint written or resumed from.
  std::optional<double> loss;
  double samples_per_second = 0.0;
  double eta_s = 0.0;
  std::optional<v1::HeldOutEvaluation> evaluation;  // The last stage's, once evaluated.
};

// Sends a SiteReport every `interval_s` (and once more on destruction) with the figures of the
// interval since the previous one. After MarkFinished() the last report tells the gateway that the
// site completed its job, so the end of its stream is not taken for a failure.
//
// Thread-safe. Runs `send` on its own thread, and on the destroying one.
class SiteReportSender {
 public:
  // `metrics` and `progress` must outlive the sender.
  SiteReportSender(std::function<void(const v1::SiteReport&)> send, SiteMetrics& metrics,
                   SiteProgress& progress, double interval_s);
  // Stops the thread and sends the last report.
  ~SiteReportSender();

  void MarkFinished() { finished_ = true; }
  // Sends a report now (e.g. the first step of a new generation: the gateway measures recovery).
  void SendSoon();

 private:
  void Run();
  void Send();

  const std::function<void(const v1::SiteReport&)> send_;
  SiteMetrics& metrics_;
  SiteProgress& progress_;
  const double interval_;
  SiteMetrics::Totals previous_;  // Used by the reporting thread, then by the destructor.
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool soon_ = false;
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace strait::site
