#include "core/run_report.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/logging.h"

namespace strait {

std::string FormatProgressLine(const ProgressFigures& f) {
  std::string line = absl::StrFormat("step %6d/%d", f.step, f.total);
  if (f.epoch) absl::StrAppendFormat(&line, "  epoch %.2f", *f.epoch);
  if (f.loss) absl::StrAppendFormat(&line, "  loss %.4f", *f.loss);
  absl::StrAppendFormat(&line, "  %.0f samples/s  ETA %s", f.samples_per_second,
                        FormatDuration(f.eta_s));
  return line;
}

void LossHistory::Restart(int64_t from) {
  if (first_step_ < 0 || from < first_step_) {
    first_step_ = from;
    losses_.clear();
  }
  losses_.resize(std::min<size_t>(losses_.size(), static_cast<size_t>(from - first_step_)));
}

void LossHistory::Add(double loss) {
  if (first_step_ < 0) first_step_ = 0;
  losses_.push_back(loss);
}

RunReport::RunReport(int64_t total_steps, int global_batch, std::FILE* out)
    : total_steps_(total_steps),
      global_batch_(global_batch),
      out_(out),
      window_start_(Clock::now()) {}

double RunReport::WindowSeconds(Clock::time_point now) const {
  return std::chrono::duration<double>(now - window_start_).count();
}

void RunReport::PrintProgress(int64_t step, std::optional<double> epoch, std::optional<double> loss,
                              std::optional<double> eta_s, Clock::time_point now) {
  const double rate =
      static_cast<double>(window_steps_) * global_batch_ / std::max(WindowSeconds(now), 1e-9);
  ProgressFigures figures;
  figures.step = step;
  figures.total = total_steps_;
  figures.epoch = epoch;
  figures.loss = loss;
  figures.samples_per_second = rate;
  figures.eta_s =
      eta_s ? *eta_s
            : static_cast<double>(total_steps_ - step) * global_batch_ / std::max(rate, 1e-9);
  Print(FormatProgressLine(figures));
  RestartWindow(now);
}

void RunReport::RestartWindow(Clock::time_point now) {
  window_start_ = now;
  window_steps_ = 0;
}

void RunReport::Print(const std::string& line) {
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

absl::Status RunReport::WriteMetrics(const std::string& dir) const {
  return WriteJsonFile(dir + "/metrics.json", metrics_);
}

absl::Status WriteJsonFile(const std::string& path, const nlohmann::json& value) {
  const std::string text = value.dump(1) + "\n";
  auto failed = [&path](const char* what) {
    return absl::InternalError(
        absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(errno)));
  };
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return failed("create");
  // fwrite may only buffer: a full disk shows at the flush, or at the close.
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  if (!written || std::fflush(file) != 0) {
    const int error = errno;
    std::fclose(file);
    errno = error;
    return failed("write");
  }
  if (std::fclose(file) != 0) return failed("close");
  return absl::OkStatus();
}

}  // namespace strait
