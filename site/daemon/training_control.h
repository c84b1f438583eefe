// When and from where a site trains, as the gateway decides it (DESIGN.md §7): a Rollback{step,
// generation} starts (or restarts) training from the checkpoint of `step`; a Pause (a site of the
// federation went down) and a newer Rollback interrupt the running generation; a Stop ends the job.
// Control messages arrive on the gateway client's thread; the training thread waits here.
//
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>

#include "absl/status/statusor.h"
#include "site/pipeline/generation_runner.h"
#include "strait/v1/gateway.pb.h"

namespace strait::site {

class TrainingControl {
 public:
  // Takes a Rollback, Pause or Stop; returns false for other kinds (not handled here).
  bool Handle(const v1::Control& control);

  // The connection to the gateway is lost: interrupts the current generation; WaitForStart returns
  // UNAVAILABLE until Reconnected().
  void Disconnected(const absl::Status& status);
  // A new connection: forgets starts of the old one (the gateway sends a fresh Rollback).
  void Reconnected();

  // Blocks until a Rollback not taken yet arrives (returned), the job is stopped (the Stop's reason
  // as ABORTED) or the connection is lost (UNAVAILABLE). Calls `waiting()` every `notice`
  // meanwhile. Clears Interrupted().
  absl::StatusOr<v1::Rollback> WaitForStart(std::chrono::milliseconds notice,
                                            const std::function<void()>& waiting);

  // The runner of the current generation, or nullptr. A Pause, Rollback or Stop aborts it; if one
  // arrived since WaitForStart returned, `runner` is aborted at once.
  void SetActive(GenerationRunner* runner);

  // True when the gateway interrupted the current generation (Pause or a newer Rollback): the
  // runner's error is then not a failure, and training waits for the next start.
  bool Interrupted() const;
  // Why it was interrupted (for the log).
  std::string interruption() const;

 private:
  void AbortLocked(const absl::Status& status);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<v1::Rollback> start_;  // Received, not taken yet.
  absl::Status stopped_;
  absl::Status disconnected_;  // Non-OK from a lost connection until Reconnected().
  absl::Status interrupted_;   // Non-OK once the current generation is interrupted.
  GenerationRunner* active_ = nullptr;
};

}  // namespace strait::site
