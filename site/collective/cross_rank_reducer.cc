// The hierarchical all-reduce of a multi-rank CPU site: local sum, Gloo across ranks, copy back,
// bucket by bucket on one communication thread that overlaps the backward pass.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "site/collective/all_reducer.h"
#include "site/collective/gloo_group.h"

namespace strait::site {
namespace {

class CrossRankCpuReducer final : public AllReducer {
 public:
  CrossRankCpuReducer(std::vector<float*> buffers, std::vector<Bucket> buckets, GlooGroup* group)
      : buffers_(std::move(buffers)),
        buckets_(std::move(buckets)),
        group_(group),
        arrived_(buckets_.size(), 0),
        thread_([this] { Loop(); }) {}

  ~CrossRankCpuReducer() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }

  void Ready(int /*replica*/, int bucket) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (++arrived_[bucket] == replicas()) {
      queue_.push_back(bucket);
      cv_.notify_all();
    }
  }

  absl::Status Finish(int replica) override {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t round = round_;
    const auto waiting = std::chrono::steady_clock::now();
    cv_.wait(lock, [&] { return reduced_ == buckets_.size(); });
    if (replica == 0) times_.exposed_s += Since(waiting);
    const absl::Status status = error_;
    // Barrier: every replica has seen the round complete before it resets.
    if (++finished_ == replicas()) {
      std::fill(arrived_.begin(), arrived_.end(), 0);
      reduced_ = 0;
      finished_ = 0;
      error_ = absl::OkStatus();
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
    return status;
  }

  Times times() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return times_;
  }

 private:
  int replicas() const { return static_cast<int>(buffers_.size()); }
  static double Since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      const int bucket = queue_.front();
      queue_.pop_front();
      lock.unlock();
      const auto start = std::chrono::steady_clock::now();
      absl::Status s = Reduce(bucket);
      lock.lock();
      times_.busy_s += Since(start);
      if (!s.ok() && error_.ok()) error_ = std::move(s);
      ++reduced_;
      cv_.notify_all();
    }
  }

  absl::Status Reduce(int bucket) {
    const Bucket& b = buckets_[bucket];
    float* sum = buffers_[0] + b.offset;
    for (int r = 1; r < replicas(); ++r) {
      const float* src = buffers_[r] + b.offset;
      for (int64_t i = 0; i < b.count; ++i) sum[i] += src[i];
    }
    absl::Status s = group_->AllReduceSum(sum, b.count, static_cast<uint32_t>(bucket));
    for (int r = 1; r < replicas(); ++r) {
      std::memcpy(buffers_[r] + b.offset, sum, sizeof(float) * b.count);
    }
    return s;
  }

  const std::vector<float*> buffers_;
  const std::vector<Bucket> buckets_;
  GlooGroup* const group_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Times times_;
  std::vector<int> arrived_;  // This round: per bucket, the local replicas that made it ready.
  std::deque<int> queue_;     // Buckets ready everywhere in process, not yet reduced.
  size_t reduced_ = 0;        // Buckets of this round done (summed, or failed).
  absl::Status error_;        // This round's first error.
  int finished_ = 0;
  uint64_t round_ = 0;
  bool stop_ = false;
  std::thread thread_;  // Last: starts once the members above exist.
};

}  // namespace

absl::StatusOr<std::unique_ptr<AllReducer>> CreateCrossRankCpuReducer(std::vector<float*> buffers,
                                                                      std::vector<Bucket> buckets,
                                                                      GlooGroup* group) {
  if (buffers.empty()) return absl::InvalidArgumentError("all-reduce of no replicas");
  if (group == nullptr) return absl::InvalidArgumentError("cross-rank all-reduce without a group");
  return std::unique_ptr<AllReducer>(
      new CrossRankCpuReducer(std::move(buffers), std::move(buckets), group));
}

}  // namespace strait::site
