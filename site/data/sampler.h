// The order in which training samples are visited, identical in every process of a federation.
//
// Epoch e visits a permutation of [0, size) that depends only on (seed, e); global step s uses
// samples [b * batch, (b + 1) * batch) of epoch s / BatchesPerEpoch()'s permutation, where
// b = s % BatchesPerEpoch() (the last partial batch of an epoch is dropped). So the first stage
// (inputs) and the last stage (labels) agree without exchanging anything.
//
// Replicas (data parallel, issue 31): replica r of R takes the r-th of the R consecutive batches
// that one pipeline with R times the batch would take in that step, so the replicas' shards are
// disjoint and together are exactly that pipeline's batch.
#pragma once

#include <cstdint>
#include <vector>

namespace strait::site {

class Sampler {
 public:
  // size >= batch * replicas, batch >= 1, 0 <= replica < replicas.
  Sampler(uint64_t seed, int64_t size, int batch, int replica = 0, int replicas = 1);

  // Steps per epoch (each replica's batch of a step comes from the same epoch).
  int64_t BatchesPerEpoch() const { return size_ / (int64_t{batch_} * replicas_); }

  // The sample indices of global step `step` (0-based), in order. Caches the current epoch's
  // permutation; not thread-safe.
  const std::vector<int64_t>& Batch(int64_t step);

 private:
  uint64_t seed_;
  int64_t size_;
  int batch_;
  int replica_, replicas_;
  int64_t epoch_ = -1;
  std::vector<int64_t> permutation_;
  std::vector<int64_t> batch_indices_;
};

// The permutation of epoch `epoch`: Fisher-Yates driven by counter-based hashes.
std::vector<int64_t> EpochPermutation(uint64_t seed, int64_t epoch, int64_t size);

}  // namespace strait::site
