// What an emulated WAN link does to a TCP stream (rate, delay, jitter, loss bursts), the named
// profiles of DESIGN.md §10, and the parsers for the `strait wan` command line. Pure functions and
// plain values: no I/O, safe to call from any thread.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strait::harness {

// Loss as a TCP stream sees it: a lost segment holds every byte behind it until the retransmission
// arrives, so the stream stalls. Bursts start at exponentially distributed intervals with mean
// `mean_interval` and last `duration`. Zero (either field) = no loss.
struct LossBurst {
  std::chrono::milliseconds mean_interval{0};
  std::chrono::milliseconds duration{0};
};

// One direction's model; both directions of an emulated link use the same profile.
struct LinkProfile {
  std::string name;                 // "metro", "region", "continent", "satellite" or "custom".
  double rate_bits_per_second = 0;  // Per direction; 0 = unlimited.
  std::chrono::microseconds one_way_delay{0};
  std::chrono::microseconds jitter{0};  // Extra delay, uniform in [0, jitter]; byte order is kept.
  LossBurst loss_burst;
};

// The named profiles: metro 10 Gbit/s 1 ms one-way, region 1 Gbit/s 15 ms, continent 100 Mbit/s
// 75 ms, satellite 20 Mbit/s 300 ms (no jitter, no loss). InvalidArgument, listing the names, for
// any other name.
absl::StatusOr<LinkProfile> NamedProfile(std::string_view name);

// The names NamedProfile() knows, fastest link first.
std::vector<std::string> ProfileNames();

// "100mbit", "1gbit", "10Gbit/s", "500kbit", "2.5gbit", "64kbps" (SI units of bits, case ignored)
// -> bits per second, positive; "unlimited" -> 0. InvalidArgument otherwise.
absl::StatusOr<double> ParseRate(std::string_view text);

// "15ms", "1.5s", "300us", "0" -> microseconds, not negative. InvalidArgument otherwise.
absl::StatusOr<std::chrono::microseconds> ParseDuration(std::string_view text);

// "MEAN_INTERVAL:DURATION", e.g. "10s:200ms" (both positive). InvalidArgument otherwise.
absl::StatusOr<LossBurst> ParseLossBurst(std::string_view text);

// One line for people: "continent: 100 Mbit/s, 75 ms one-way", with ", jitter 5 ms" and
// ", loss bursts of 200 ms every 10 s on average" when those are set.
std::string Describe(const LinkProfile& profile);

}  // namespace strait::harness
