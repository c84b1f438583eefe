// One direction of an emulated WAN link as arithmetic on times: the bottleneck that serializes
// bytes at the link's rate, its bounded buffer, the one-way delay, jitter and loss bursts (see
// link_emulator.h for the model in words). No I/O and no clock of its own, so tests can drive it
// with made-up times.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>

#include "harness/wan/link_profile.h"

namespace strait::harness {

// Not thread-safe: one owner (the emulator's I/O thread) calls it.
class DirectionModel {
 public:
  using Clock = std::chrono::steady_clock;

  // `seed` drives jitter and loss bursts; `start` is when the link comes up (the first loss burst
  // comes an exponentially distributed interval after it).
  DirectionModel(const LinkProfile& profile, uint64_t seed, Clock::time_point start);

  // `bytes` read from a socket at `arrival` enter the bottleneck. Returns when they reach the far
  // end: transmit_end + one-way delay + U(0, jitter), or later when a loss burst covers
  // transmit_end. Keeping a stream's order (never before its previous piece) is the caller's part.
  // 0 bytes (a FIN) wait behind the queued bytes but take no time on the wire.
  Clock::time_point Send(size_t bytes, Clock::time_point arrival);

  // Zero while the bottleneck buffer (bytes not yet serialized) has room; otherwise how long until
  // it has: a reader should wait that long before reading more, which back-pressures the sender.
  Clock::duration WaitForRoom(Clock::time_point now) const;

  // The bottleneck buffer: max(256 KiB, 2 x rate x 10 ms); unbounded for an unlimited rate.
  size_t buffer_bytes() const { return buffer_bytes_; }

  // The most read-but-undelivered bytes one connection should hold in this direction: the buffer
  // plus what the pipe carries in the delay, jitter and one loss burst, at least 4 MiB; 64 MiB for
  // an unlimited rate. A connection that holds this much stops reading, as a closed TCP receive
  // window would (and as a stalled link makes it do).
  size_t max_held_bytes() const { return max_held_bytes_; }

 private:
  const double rate_;  // bits per second; 0 = unlimited
  const Clock::duration delay_;
  const Clock::duration jitter_;
  const Clock::duration burst_duration_;
  const double burst_mean_seconds_;  // 0 = no loss bursts
  size_t buffer_bytes_ = 0;
  size_t max_held_bytes_ = 0;
  Clock::duration buffer_time_{0};  // buffer_bytes_ at the rate
  Clock::time_point link_free_at_;  // when the bottleneck has serialized everything given so far
  Clock::time_point burst_start_;   // the current or next loss burst
  std::mt19937_64 rng_;
};

}  // namespace strait::harness
