// What a site measures while it trains (DESIGN.md §8): where the time goes and how many bytes cross
// each link, added up by the threads that do the work and read by the reporter and the summary.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "strait/v1/gateway.pb.h"

namespace strait::site {

// kForward, kBackward and kUpdate split the compute time of training steps (each also counts in
// kCompute): per-microbatch forward and backward times and the per-step update (clipping norm and
// optimizer), which `strait bench e2e` needs for the lower bound on step time. kTeacherWait is the
// part of kWait the student's last stage spends waiting for the teacher's targets.
enum class Timer {
  kCompute,
  kWait,
  kEncode,
  kDecode,
  kSeal,
  kOpen,
  kForward,
  kBackward,
  kUpdate,
  kTeacherWait
};
inline constexpr int kTimerCount = 10;

// What a frame of `key` counts towards (SiteMetrics::AddFrame): SUM for the replicas' sums, TEACH
// for the teacher's links, TRAIN for everything on a pipeline link.
inline v1::Purpose LinkPurpose(const v1::TensorKey& key) {
  return key.purpose() == v1::SUM || key.purpose() == v1::TEACH ? key.purpose() : v1::TRAIN;
}

// One outer round (site/pipeline/outer_rounds.h): its time from sending to landing, the part of it
// the training thread waited (the rest ran behind inner steps), the bytes of the masked words it
// sent, and those of the same values as dense fp32 (4 bytes each of the stage's parameters).
struct OuterRoundFigures {
  double round_s = 0, exposed_s = 0;
  uint64_t bytes = 0, dense_bytes = 0;
  bool last = false;  // The run's last round, over every value.
};

struct OuterRoundTotals {
  uint64_t rounds = 0;
  double round_s = 0, exposed_s = 0;
  uint64_t bytes = 0, dense_bytes = 0;
  OuterRoundFigures latest;  // The latest round before the last one (a steady round).
};

// Thread-safe.
class SiteMetrics {
 public:
  struct Totals {
    std::array<double, kTimerCount> seconds{};
    // One entry per (purpose, boundary, direction, sent), sorted.
    std::vector<v1::LinkBytes> links;
    uint64_t rejected_frames = 0;
    OuterRoundTotals outer;
    double Seconds(Timer t) const { return seconds[static_cast<int>(t)]; }
  };

  void AddTime(Timer timer, double seconds);
  // `purpose`: TRAIN for the frames of a pipeline link (whatever their key's purpose), SUM for a
  // replica's secure sums (`boundary` is then its stage).
  void AddFrame(uint32_t boundary, v1::Direction direction, bool sent, uint64_t raw_bytes,
                uint64_t wire_bytes, v1::Purpose purpose = v1::TRAIN);
  void AddRejectedFrame();
  void AddOuterRound(const OuterRoundFigures& round);
  Totals Snapshot() const;

  // `now` minus `before`, for reports that cover the interval between two snapshots.
  static Totals Difference(const Totals& now, const Totals& before);

 private:
  using LinkKey = std::tuple<int, uint32_t, int, bool>;
  mutable std::mutex mu_;
  std::array<double, kTimerCount> seconds_{};
  std::map<LinkKey, v1::LinkBytes> links_;
  uint64_t rejected_frames_ = 0;
  OuterRoundTotals outer_;
};

}  // namespace strait::site
