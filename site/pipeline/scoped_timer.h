// Adds a scope's wall time to one of a site's timers (site_metrics.h), and to a part of it too when
// given (kForward, kBackward and kUpdate are parts of kCompute). For the training thread.
#pragma once

#include <chrono>

#include "site/pipeline/site_metrics.h"

namespace strait::site {

class ScopedTimer {
 public:
  ScopedTimer(SiteMetrics& metrics, Timer timer) : ScopedTimer(metrics, timer, timer) {}
  ScopedTimer(SiteMetrics& metrics, Timer timer, Timer part)
      : metrics_(metrics), timer_(timer), part_(part), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    metrics_.AddTime(timer_, seconds);
    if (part_ != timer_) metrics_.AddTime(part_, seconds);
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  SiteMetrics& metrics_;
  Timer timer_;
  Timer part_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace strait::site
