#include "site/data/sampler.h"

#include <numeric>
#include <utility>

#include "site/backend/counter_rng.h"

namespace strait::site {

std::vector<int64_t> EpochPermutation(uint64_t seed, int64_t epoch, int64_t size) {
  std::vector<int64_t> perm(size);
  std::iota(perm.begin(), perm.end(), 0);
  const uint64_t key = CombineKey(CombineKey(seed, 0x53414d50 /* "SAMP" */), epoch);
  for (int64_t i = size - 1; i > 0; --i) {
    // Multiply-shift maps 64 random bits onto [0, i]; bias is below 2^-40 for our sizes.
    const uint64_t r = CombineKey(key, i);
    const int64_t j = static_cast<int64_t>((static_cast<unsigned __int128>(r) * (i + 1)) >> 64);
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

Sampler::Sampler(uint64_t seed, int64_t size, int batch, int replica, int replicas)
    : seed_(seed), size_(size), batch_(batch), replica_(replica), replicas_(replicas) {}

const std::vector<int64_t>& Sampler::Batch(int64_t step) {
  const int64_t epoch = step / BatchesPerEpoch();
  const int64_t b = (step % BatchesPerEpoch()) * replicas_ + replica_;  // This replica's batch.
  if (epoch != epoch_) {
    permutation_ = EpochPermutation(seed_, epoch, size_);
    epoch_ = epoch;
  }
  batch_indices_.assign(permutation_.begin() + b * batch_, permutation_.begin() + (b + 1) * batch_);
  return batch_indices_;
}

}  // namespace strait::site
