#include "site/pipeline/site_metrics.h"

namespace strait::site {

void SiteMetrics::AddTime(Timer timer, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  seconds_[static_cast<int>(timer)] += seconds;
}

void SiteMetrics::AddFrame(uint32_t boundary, v1::Direction direction, bool sent,
                           uint64_t raw_bytes, uint64_t wire_bytes, v1::Purpose purpose) {
  std::lock_guard<std::mutex> lock(mu_);
  v1::LinkBytes& link =
      links_[{static_cast<int>(purpose), boundary, static_cast<int>(direction), sent}];
  link.set_purpose(purpose);
  link.set_boundary(boundary);
  link.set_direction(direction);
  link.set_sent(sent);
  link.set_raw_bytes(link.raw_bytes() + raw_bytes);
  link.set_wire_bytes(link.wire_bytes() + wire_bytes);
  link.set_frames(link.frames() + 1);
}

void SiteMetrics::AddRejectedFrame() {
  std::lock_guard<std::mutex> lock(mu_);
  ++rejected_frames_;
}

void SiteMetrics::AddOuterRound(const OuterRoundFigures& round) {
  std::lock_guard<std::mutex> lock(mu_);
  ++outer_.rounds;
  outer_.round_s += round.round_s;
  outer_.exposed_s += round.exposed_s;
  outer_.bytes += round.bytes;
  outer_.dense_bytes += round.dense_bytes;
  if (!round.last) outer_.latest = round;
}

SiteMetrics::Totals SiteMetrics::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Totals totals;
  totals.seconds = seconds_;
  for (const auto& [key, link] : links_) totals.links.push_back(link);
  totals.rejected_frames = rejected_frames_;
  totals.outer = outer_;
  return totals;
}

SiteMetrics::Totals SiteMetrics::Difference(const Totals& now, const Totals& before) {
  Totals d = now;
  for (int i = 0; i < kTimerCount; ++i) d.seconds[i] -= before.seconds[i];
  for (v1::LinkBytes& link : d.links) {
    for (const v1::LinkBytes& old : before.links) {
      if (old.boundary() == link.boundary() && old.direction() == link.direction() &&
          old.sent() == link.sent() && old.purpose() == link.purpose()) {
        link.set_raw_bytes(link.raw_bytes() - old.raw_bytes());
        link.set_wire_bytes(link.wire_bytes() - old.wire_bytes());
        link.set_frames(link.frames() - old.frames());
      }
    }
  }
  d.rejected_frames -= before.rejected_frames;
  d.outer.rounds -= before.outer.rounds;
  d.outer.round_s -= before.outer.round_s;
  d.outer.exposed_s -= before.outer.exposed_s;
  d.outer.bytes -= before.outer.bytes;
  d.outer.dense_bytes -= before.outer.dense_bytes;
  return d;
}

}  // namespace strait::site
