// Files and time for the code that keeps and recovers state (checkpoints, layer moves, the waits of
// recovery), behind an interface as leveldb's Env (DESIGN.md §9): production passes Env::Default(),
// the files of the local disk and the steady clock; tests pass a fake (tests/unit/core/mem_env.h:
// files in memory, a clock that moves only when told), so those paths are unit-tested without a
// disk or a sleep. Implementations are thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strait {

class Env {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~Env() = default;

  // The whole file; NotFound when it does not exist, Internal with the OS's reason otherwise.
  virtual absl::StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // Replaces `path` with `data` atomically: a reader sees the old file or the new one, never a
  // part, and after a crash one of them is on the disk (write a temporary beside it, sync, rename,
  // sync the directory). Makes the directory if it is missing.
  virtual absl::Status WriteFileAtomically(const std::string& path, absl::string_view data) = 0;
  // Renames atomically (replacing `to`); NotFound when `from` does not exist.
  virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Removes a file; a missing one is not an error.
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  // The names (not paths) of the regular files in `dir`, sorted; empty when `dir` is missing.
  virtual absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir) = 0;

  virtual Clock::time_point Now() = 0;
  virtual void SleepFor(Clock::duration duration) = 0;

  // The local disk and the steady clock; lives for the whole process.
  static Env* Default();
};

}  // namespace strait
