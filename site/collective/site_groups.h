// The collective groups of one rank of a site of several machines (DESIGN.md §4): with tensor
// parallelism T, rank r is tensor rank r % T of data-parallel replica r / T; it sums partial
// activations and gradients with its replica's T tensor ranks (GlooTensorReducer, inside the
// layers' passes) and gradients with the other replicas' rank of the same tensor index (the
// cross-rank reducer, after the backward pass). Without tensor parallelism the data group is the
// whole site.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "site/collective/gloo_group.h"
#include "site/collective/rendezvous_store.h"
#include "site/nn/layer.h"

namespace strait::site {

// TensorReducer over a Gloo group of CPU ranks. Thread-safe; sums run in the order called, which
// is the same on every rank (the layers' passes).
class GlooTensorReducer final : public TensorReducer {
 public:
  explicit GlooTensorReducer(GlooGroup* group) : group_(group) {}  // Not owned.
  void AllReduceSum(Backend& backend, TypedPtr data, int64_t count) override;
  absl::Status status() const override;

 private:
  GlooGroup* const group_;
  mutable std::mutex mu_;
  absl::Status status_;
  uint32_t tag_ = 0;
};

struct SiteGroups {
  std::unique_ptr<GlooGroup> tensor;           // Null without tensor parallelism.
  std::unique_ptr<GlooGroup> data;             // Null with one replica.
  std::unique_ptr<GlooTensorReducer> reducer;  // Over `tensor`; null without it.
};

// Rank `rank` of a site of `machines` ranks, `tensor_parallel` of them in each replica.
struct SiteRank {
  int rank = 0;
  int machines = 1;
  int tensor_parallel = 1;
};

// Connects `place`'s groups (tensor, then data: the same order on every rank) under `prefix`,
// binding to `host` and waiting for the other ranks up to `timeout`.
absl::StatusOr<SiteGroups> ConnectSiteGroups(RendezvousStore& store, const std::string& prefix,
                                             SiteRank place, const std::string& host,
                                             std::chrono::milliseconds timeout);

}  // namespace strait::site
