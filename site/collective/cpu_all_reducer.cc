// The shared-memory all-reduce of CPU replicas: a round's state under one mutex, the arithmetic
// outside it, each replica's thread summing its own slice of every bucket.
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "site/collective/all_reducer.h"

namespace strait::site {
namespace {

// Slice edges are multiples of 16 floats (one cache line), so replicas never write the same line.
constexpr int64_t kAlignFloats = 16;
// Floats summed per pass through the replicas: small enough to stay in L1 with a few sources.
constexpr int64_t kChunkFloats = 2048;

class CpuAllReducer final : public AllReducer {
 public:
  CpuAllReducer(std::vector<float*> buffers, std::vector<Bucket> buckets)
      : buffers_(std::move(buffers)),
        buckets_(std::move(buckets)),
        arrived_(buckets_.size(), 0),
        taken_(buffers_.size(), 0) {}

  void Ready(int replica, int bucket) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (++arrived_[bucket] == replicas()) {
        complete_.push_back(bucket);
        cv_.notify_all();
      }
    }
    ReduceCompleted(replica, /*until_all=*/false);
  }

  absl::Status Finish(int replica) override {
    ReduceCompleted(replica, /*until_all=*/true);
    // Barrier: the other replicas' slices of this replica's buffer must be written too.
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t round = round_;
    if (++finished_ == replicas()) {
      std::fill(arrived_.begin(), arrived_.end(), 0);
      std::fill(taken_.begin(), taken_.end(), 0);
      complete_.clear();
      finished_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
    return absl::OkStatus();
  }

 private:
  int replicas() const { return static_cast<int>(buffers_.size()); }

  // Sums this replica's slice of every bucket that all replicas have made ready and it has not
  // summed yet; with until_all, waits for the remaining buckets and sums them too.
  void ReduceCompleted(int replica, bool until_all) {
    std::unique_lock<std::mutex> lock(mu_);
    size_t& taken = taken_[replica];
    for (;;) {
      if (until_all) {
        cv_.wait(lock, [&] { return taken < complete_.size() || taken == buckets_.size(); });
      }
      if (taken == complete_.size()) return;
      const int bucket = complete_[taken++];
      lock.unlock();
      ReduceSlice(bucket, replica);
      lock.lock();
    }
  }

  void ReduceSlice(int bucket, int slice) const {
    const int w = replicas();
    const Bucket& b = buckets_[bucket];
    auto edge = [&](int i) {
      return i == w ? b.count : std::min(b.count, b.count * i / w / kAlignFloats * kAlignFloats);
    };
    float acc[kChunkFloats];
    for (int64_t begin = b.offset + edge(slice), end = b.offset + edge(slice + 1); begin < end;
         begin += kChunkFloats) {
      const int64_t n = std::min(kChunkFloats, end - begin);
      std::memcpy(acc, buffers_[0] + begin, sizeof(float) * n);
      for (int r = 1; r < w; ++r) {
        const float* src = buffers_[r] + begin;
        for (int64_t i = 0; i < n; ++i) acc[i] += src[i];
      }
      for (int r = 0; r < w; ++r) std::memcpy(buffers_[r] + begin, acc, sizeof(float) * n);
    }
  }

  const std::vector<float*> buffers_;
  const std::vector<Bucket> buckets_;
  std::mutex mu_;
  std::condition_variable cv_;
  // This round: per bucket, how many replicas made it ready; the buckets ready everywhere, in the
  // order they became so; per replica, how many of those it has summed its slice of.
  std::vector<int> arrived_;
  std::vector<int> complete_;
  std::vector<size_t> taken_;
  int finished_ = 0;  // replicas through Finish's barrier
  uint64_t round_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<AllReducer>> CreateCpuAllReducer(std::vector<float*> buffers,
                                                                std::vector<Bucket> buckets) {
  if (buffers.empty()) return absl::InvalidArgumentError("all-reduce of no replicas");
  for (const Bucket& b : buckets) {
    if (b.offset < 0 || b.count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("all-reduce bucket [", b.offset, ", +", b.count, ") is negative"));
    }
  }
  return std::unique_ptr<AllReducer>(new CpuAllReducer(std::move(buffers), std::move(buckets)));
}

}  // namespace strait::site
