#include "harness/wan/link_model.h"

#include <algorithm>

namespace strait::harness {
namespace {

using Clock = DirectionModel::Clock;

Clock::duration Seconds(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

DirectionModel::DirectionModel(const LinkProfile& profile, uint64_t seed, Clock::time_point start)
    : rate_(std::max(0.0, profile.rate_bits_per_second)),
      delay_(profile.one_way_delay),
      jitter_(profile.jitter),
      burst_duration_(profile.loss_burst.duration),
      burst_mean_seconds_(profile.loss_burst.mean_interval.count() > 0 &&
                                  profile.loss_burst.duration.count() > 0
                              ? profile.loss_burst.mean_interval.count() / 1e3
                              : 0),
      link_free_at_(start),
      burst_start_(start),
      rng_(seed) {
  const double bytes_per_second = rate_ / 8;
  const double in_flight_seconds =
      std::chrono::duration<double>(
          delay_ + jitter_ + (burst_mean_seconds_ > 0 ? burst_duration_ : Clock::duration{0}))
          .count();
  if (rate_ > 0) {
    buffer_bytes_ = std::max<size_t>(256 << 10, static_cast<size_t>(2 * bytes_per_second * 0.010));
    buffer_time_ = Seconds(buffer_bytes_ / bytes_per_second);
    max_held_bytes_ = std::max<size_t>(
        4 << 20, buffer_bytes_ + static_cast<size_t>(bytes_per_second * in_flight_seconds));
  } else {
    buffer_bytes_ = SIZE_MAX;
    max_held_bytes_ = 64 << 20;
  }
  if (burst_mean_seconds_ > 0) {
    burst_start_ += Seconds(std::exponential_distribution<double>(1 / burst_mean_seconds_)(rng_));
  }
}

Clock::time_point DirectionModel::Send(size_t bytes, Clock::time_point arrival) {
  Clock::time_point transmit_end = std::max(arrival, link_free_at_);
  if (rate_ > 0) transmit_end += Seconds(bytes * 8 / rate_);
  link_free_at_ = transmit_end;

  Clock::time_point delivery = transmit_end + delay_;
  if (jitter_.count() > 0) {
    delivery +=
        Clock::duration(std::uniform_int_distribution<Clock::rep>(0, jitter_.count())(rng_));
  }
  if (burst_mean_seconds_ > 0) {
    // Move to the burst that is under way at transmit_end, or the next one.
    std::exponential_distribution<double> interval(1 / burst_mean_seconds_);
    while (burst_start_ + burst_duration_ <= transmit_end) burst_start_ += Seconds(interval(rng_));
    if (transmit_end >= burst_start_) {
      // Lost: it arrives with the retransmission once the burst is over.
      delivery = std::max(delivery, burst_start_ + burst_duration_ + delay_);
    }
  }
  return delivery;
}

Clock::duration DirectionModel::WaitForRoom(Clock::time_point now) const {
  if (rate_ <= 0) return Clock::duration{0};
  const Clock::duration backlog = link_free_at_ - now;
  return backlog > buffer_time_ ? backlog - buffer_time_ : Clock::duration{0};
}

}  // namespace strait::harness
