#include "site/daemon/training_control.h"

#include "absl/strings/str_cat.h"

namespace strait::site {

bool TrainingControl::Handle(const v1::Control& control) {
  std::lock_guard<std::mutex> lock(mu_);
  switch (control.kind_case()) {
    case v1::Control::kRollback:
      start_ = control.rollback();
      AbortLocked(absl::AbortedError(
          absl::StrCat("the federation rolls back to step ", control.rollback().step())));
      break;
    case v1::Control::kPause:
      AbortLocked(absl::AbortedError("paused: " + control.pause().reason()));
      break;
    case v1::Control::kStop:
      stopped_ = absl::AbortedError("the gateway stopped the job: " + control.stop().reason());
      AbortLocked(stopped_);
      break;
    default:
      return false;
  }
  cv_.notify_all();
  return true;
}

void TrainingControl::AbortLocked(const absl::Status& status) {
  if (interrupted_.ok()) interrupted_ = status;
  if (active_ != nullptr) active_->Abort(status);
}

void TrainingControl::Disconnected(const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  disconnected_ = status;
  AbortLocked(status);
  cv_.notify_all();
}

void TrainingControl::Reconnected() {
  std::lock_guard<std::mutex> lock(mu_);
  disconnected_ = absl::OkStatus();
  start_.reset();
}

absl::StatusOr<v1::Rollback> TrainingControl::WaitForStart(std::chrono::milliseconds notice,
                                                           const std::function<void()>& waiting) {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, notice, [this] {
    return start_.has_value() || !stopped_.ok() || !disconnected_.ok();
  })) {
    lock.unlock();
    waiting();
    lock.lock();
  }
  if (!stopped_.ok()) return stopped_;
  if (!disconnected_.ok()) return disconnected_;
  v1::Rollback start = *start_;
  start_.reset();
  interrupted_ = absl::OkStatus();
  return start;
}

void TrainingControl::SetActive(GenerationRunner* runner) {
  std::lock_guard<std::mutex> lock(mu_);
  active_ = runner;
  if (runner != nullptr && !interrupted_.ok()) runner->Abort(interrupted_);
}

bool TrainingControl::Interrupted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !interrupted_.ok() && stopped_.ok();
}

std::string TrainingControl::interruption() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::string(interrupted_.message());
}

}  // namespace strait::site
