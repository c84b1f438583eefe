#include "site/collective/worker_pool.h"

namespace strait::site {

WorkerPool::WorkerPool(int workers) : results_(workers) {
  threads_.reserve(workers);
  for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w] { Loop(w); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

absl::Status WorkerPool::Run(const std::function<absl::Status(int)>& fn) {
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  pending_ = workers();
  ++generation_;
  start_cv_.notify_all();
  done_cv_.wait(lock, [&] { return pending_ == 0; });
  job_ = nullptr;
  absl::Status first;
  for (absl::Status& s : results_) {
    first.Update(s);
    s = absl::OkStatus();
  }
  return first;
}

void WorkerPool::Loop(int worker) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const std::function<absl::Status(int)>* job = job_;
    lock.unlock();
    absl::Status s = (*job)(worker);
    lock.lock();
    results_[worker] = std::move(s);
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

}  // namespace strait::site
