// One persistent thread per worker of a StageExecutor (site/pipeline/stage_executor.h): worker w's
// backend is created and always used on thread w (a CUDA backend's calls need that thread's
// current device to be its own).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace strait::site {

class WorkerPool {
 public:
  // Starts `workers` >= 1 threads.
  explicit WorkerPool(int workers);
  ~WorkerPool();  // Joins the threads; no Run may be in progress.
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int workers() const { return static_cast<int>(threads_.size()); }

  // Calls fn(w) on thread w for every worker w, concurrently, and blocks until all have returned.
  // Returns the first error in worker order. fn must not call Run. One caller at a time.
  absl::Status Run(const std::function<absl::Status(int worker)>& fn);

 private:
  void Loop(int worker);

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<absl::Status(int)>* job_ = nullptr;
  std::vector<absl::Status> results_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace strait::site
