// Bounded time series of a federation's progress, so that a dashboard opened late still shows the
// curves: per site (step, loss, samples/s, time split) and per link (raw and wire bytes per
// second).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

// Not thread-safe: the owner serializes Add and ToJson (DashboardState does).
class History {
 public:
  // Keeps at most `capacity` (>= 1) points per series; older ones are dropped.
  explicit History(size_t capacity);

  // Appends one point per site and per link of `state`, stamped `unix_ms`. A link's rates come from
  // its byte counters' growth since the previous Add (a counter that went down, e.g. after a
  // gateway restart, counts from zero); a link's first Add only records the baseline. Series of
  // sites and links absent from `state` are dropped, so memory stays bounded by the current
  // topology.
  void Add(const v1::FederationState& state, uint64_t unix_ms);

  // The points stamped after `since_unix_ms` as a JSON object:
  //   {"capacity": N,
  //    "sites": {"<id>": {"t": [ms...], "step": [...], "loss": [number|null...],
  //                       "samples_per_second": [...], "compute_s": [...], "wait_s": [...],
  //                       "encode_s": [...], "decode_s": [...], "seal_s": [...], "open_s": [...]}},
  //    "links": {"<boundary>/<forward|backward>": {"boundary": b, "direction": "forward",
  //                       "t": [...], "raw_bytes_per_s": [...], "wire_bytes_per_s": [...]}}}
  std::string ToJson(uint64_t since_unix_ms) const;

  size_t capacity() const { return capacity_; }

 private:
  struct SitePoint {
    uint64_t unix_ms;
    uint64_t step;
    bool has_loss;
    double loss;
    double samples_per_second;
    double compute_s, wait_s, encode_s, decode_s, seal_s, open_s;
  };
  struct LinkPoint {
    uint64_t unix_ms;
    double raw_bytes_per_s;
    double wire_bytes_per_s;
  };
  struct LinkSeries {
    uint32_t replica = 0;
    uint32_t boundary = 0;
    v1::Direction direction = v1::DIRECTION_UNSPECIFIED;
    uint64_t last_unix_ms = 0;  // Baseline of the rates.
    uint64_t last_raw_bytes = 0;
    uint64_t last_wire_bytes = 0;
    std::deque<LinkPoint> points;
  };

  template <typename T>
  void Push(std::deque<T>& points, const T& point) const;

  size_t capacity_;
  std::map<std::string, std::deque<SitePoint>> sites_;
  std::map<std::string, LinkSeries> links_;
};

}  // namespace strait::gateway
