// What the dashboard serves, rendered once per sample: the latest snapshot's /metrics text and
// JSON, and the history of the curves. Requests read it; the sampler writes it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "gateway/http/history.h"
#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

// Thread-safe: Update and the readers may run on any threads at once.
class DashboardState {
 public:
  // `history_capacity`: points kept per series; `sample_interval_ms` is reported to the page.
  DashboardState(size_t history_capacity, uint64_t sample_interval_ms);

  // Records a snapshot taken at `unix_ms`: renders its /metrics text and JSON once and appends it
  // to the history. Until the first Update the readers serve an empty FederationState.
  void Update(const v1::FederationState& state, uint64_t unix_ms);

  // The Prometheus text of the latest snapshot. Shared and immutable: cheap for many readers.
  std::shared_ptr<const std::string> MetricsText() const;

  // The /api/state body: {"sampled_unix_ms": ms of the latest Update, "sample_interval_ms": ms,
  // "state": the latest FederationState in proto3 JSON (proto field names, enums by name, 64-bit
  // integers as strings), "history": History::ToJson(since_unix_ms)}.
  std::string StateJson(uint64_t since_unix_ms) const;

 private:
  const uint64_t sample_interval_ms_;
  mutable std::mutex mu_;
  uint64_t sampled_unix_ms_ = 0;                   // Guarded by mu_.
  std::shared_ptr<const std::string> metrics_;     // Guarded by mu_.
  std::shared_ptr<const std::string> state_json_;  // Guarded by mu_.
  History history_;                                // Guarded by mu_.
};

}  // namespace strait::gateway
