// The W >= 1 workers of one process's part of a stage and the threads that drive them. A worker
// is a backend (CPU threads, or one CUDA device) with a Stage of the layers (site/nn/stage.h), a
// WeightHistory (the weight versions the schedule keeps and the gradient arenas:
// weight_history.h) and an Optimizer; every worker holds a copy of the same weights. Each worker is
// made, driven and torn down on a thread of its own (a persistent pool of W threads; the caller's
// thread when W = 1), so that a CUDA device stays current where its worker runs.
// Not thread-safe: one thread drives a WorkerSet, and OnWorkers blocks until every worker is done.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "site/backend/backend.h"
#include "site/collective/worker_pool.h"
#include "site/nn/optimizer.h"
#include "site/nn/stage.h"
#include "site/pipeline/weight_history.h"

namespace strait::site {

struct Worker {
  std::unique_ptr<Backend> backend;
  // Declared after the backend they allocate from: destroyed first.
  std::unique_ptr<Stage> stage;
  std::unique_ptr<WeightHistory> history;
  std::unique_ptr<Optimizer> optimizer;
  std::vector<const LayerParams*> views;  // The views of the pass in progress (reused).
};

class WorkerSet {
 public:
  // Makes `count` >= 1 workers, make(w, worker) filling worker w on worker w's thread.
  static absl::StatusOr<std::unique_ptr<WorkerSet>> Create(
      int count, const std::function<absl::Status(int w, Worker& worker)>& make);
  ~WorkerSet();  // Tears each worker down on its own thread.
  WorkerSet(const WorkerSet&) = delete;
  WorkerSet& operator=(const WorkerSet&) = delete;

  int count() const { return static_cast<int>(workers_.size()); }
  Worker& at(int w) { return workers_[w]; }
  const Worker& at(int w) const { return workers_[w]; }
  // The workers' backends, e.g. "cpu (1 threads), cpu (1 threads)".
  std::string device_names() const;

  // fn(w) for every worker, each on its own thread (on the caller's when W = 1); the first error
  // in worker order.
  absl::Status OnWorkers(const std::function<absl::Status(int worker)>& fn) const;
  // fn on worker 0's thread, returning its result.
  template <class T>
  absl::StatusOr<T> FromWorker0(const std::function<absl::StatusOr<T>(const Worker&)>& fn) const {
    absl::StatusOr<T> out;
    absl::Status s = OnWorkers([&](int w) {
      if (w != 0) return absl::OkStatus();
      out = fn(workers_[0]);
      return out.status();
    });
    if (!s.ok()) return s;
    return out;
  }

 private:
  explicit WorkerSet(int count);

  std::vector<Worker> workers_;
  std::unique_ptr<WorkerPool> pool_;  // W > 1 only.
};

}  // namespace strait::site
