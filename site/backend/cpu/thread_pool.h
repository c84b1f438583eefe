// A fixed pool of threads for data-parallel loops (the CPU backend's element-wise ops).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace strait::site {

class ThreadPool {
 public:
  // threads >= 1 (the caller of ParallelFor is one of them, so threads - 1 are started).
  explicit ThreadPool(int threads);
  ~ThreadPool();  // Joins the threads; no ParallelFor may be running.
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on disjoint ranges covering [0, n) and blocks until all have returned.
  // Ranges hold at least `grain` items (one range, on the calling thread, when n <= grain). Not
  // reentrant: fn must not call ParallelFor. One caller thread at a time.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_, done_cv_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_parts_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace strait::site
