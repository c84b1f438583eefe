// An Env for tests (core/env.h): files in memory, a clock that moves only when a test sleeps or
// advances it, and writes that fail on request. Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/env.h"

namespace strait::testing {

class MemEnv final : public Env {
 public:
  absl::StatusOr<std::string> ReadFile(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(path);
    if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file ", path));
    return it->second;
  }
  absl::Status WriteFileAtomically(const std::string& path, absl::string_view data) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!fail_writes_under_.empty() && absl::StartsWith(path, fail_writes_under_)) {
      return absl::InternalError(absl::StrCat("cannot write ", path, ": No space left on device"));
    }
    files_[path] = std::string(data);
    ++writes_;
    return absl::OkStatus();
  }
  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(from);
    if (it == files_.end()) return absl::NotFoundError(absl::StrCat("no file ", from));
    files_[to] = std::move(it->second);
    files_.erase(from);
    return absl::OkStatus();
  }
  absl::Status RemoveFile(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    files_.erase(path);
    return absl::OkStatus();
  }
  bool FileExists(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    return files_.count(path) != 0;
  }
  absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> names;
    const std::string prefix = dir + "/";
    for (const auto& [path, data] : files_) {
      if (absl::StartsWith(path, prefix) && path.find('/', prefix.size()) == std::string::npos) {
        names.push_back(path.substr(prefix.size()));
      }
    }
    return names;  // std::map: sorted
  }
  Clock::time_point Now() override {
    std::lock_guard<std::mutex> lock(mu_);
    return now_;
  }
  // Returns at once, the clock moved on by `duration`.
  void SleepFor(Clock::duration duration) override { Advance(duration); }

  void Advance(Clock::duration duration) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += duration;
  }
  // Writes of paths starting with `prefix` fail (a full disk) until called with "".
  void FailWritesUnder(const std::string& prefix) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_writes_under_ = prefix;
  }
  int writes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return writes_;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> files_;
  Clock::time_point now_{};
  std::string fail_writes_under_;
  int writes_ = 0;
};

}  // namespace strait::testing
