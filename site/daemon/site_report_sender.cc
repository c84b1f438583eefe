#include "site/daemon/site_report_sender.h"

#include <chrono>

namespace strait::site {

SiteReportSender::SiteReportSender(std::function<void(const v1::SiteReport&)> send,
                                   SiteMetrics& metrics, SiteProgress& progress, double interval_s)
    : send_(std::move(send)), metrics_(metrics), progress_(progress), interval_(interval_s) {
  thread_ = std::thread([this] { Run(); });
}

SiteReportSender::~SiteReportSender() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  Send();
}

void SiteReportSender::SendSoon() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    soon_ = true;
  }
  cv_.notify_all();
}

void SiteReportSender::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait_for(lock, std::chrono::duration<double>(interval_), [this] { return stop_ || soon_; });
    if (stop_) return;
    soon_ = false;
    lock.unlock();
    Send();
    lock.lock();
  }
}

void SiteReportSender::Send() {
  const SiteMetrics::Totals now = metrics_.Snapshot();
  const SiteMetrics::Totals delta = SiteMetrics::Difference(now, previous_);
  previous_ = now;
  v1::SiteReport report;
  {
    std::lock_guard<std::mutex> lock(progress_.mu);
    report.set_step(static_cast<uint64_t>(progress_.step));
    if (progress_.loss) {
      report.set_has_loss(true);
      report.set_loss(*progress_.loss);
    }
    report.set_samples_per_second(progress_.samples_per_second);
    report.set_eta_s(progress_.eta_s);
    report.set_generation(progress_.generation);
    if (progress_.checkpoint) {
      report.set_has_checkpoint(true);
      report.set_checkpoint_step(static_cast<uint64_t>(*progress_.checkpoint));
    }
    if (progress_.evaluation) *report.mutable_evaluation() = *progress_.evaluation;
  }
  report.set_compute_s(delta.Seconds(Timer::kCompute));
  report.set_wait_s(delta.Seconds(Timer::kWait));
  report.set_encode_s(delta.Seconds(Timer::kEncode));
  report.set_decode_s(delta.Seconds(Timer::kDecode));
  report.set_seal_s(delta.Seconds(Timer::kSeal));
  report.set_open_s(delta.Seconds(Timer::kOpen));
  report.set_teacher_wait_s(delta.Seconds(Timer::kTeacherWait));
  for (const v1::LinkBytes& l : delta.links) *report.add_links() = l;
  report.set_rejected_frames(now.rejected_frames);  // A running total (the gateway shows it).
  report.set_finished(finished_);
  send_(report);
}

}  // namespace strait::site
