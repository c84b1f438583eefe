#include "site/pipeline/outer_state.h"

#include <bit>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/pipeline/outer_schedule.h"

namespace strait::site {
namespace {

constexpr uint32_t kTag = 0x3254554fu;  // "OUT2", little-endian.

class Writer {
 public:
  void Word(uint32_t w) { out_.push_back(std::bit_cast<float>(w)); }
  void Int(int64_t v) {
    Word(static_cast<uint32_t>(v));
    Word(static_cast<uint32_t>(static_cast<uint64_t>(v) >> 32));
  }
  void Floats(std::span<const float> v) { out_.insert(out_.end(), v.begin(), v.end()); }
  std::vector<float> Take() { return std::move(out_); }

 private:
  std::vector<float> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const float> in) : in_(in) {}
  absl::StatusOr<uint32_t> Word(const char* what) {
    if (at_ >= in_.size()) return Short(what);
    return std::bit_cast<uint32_t>(in_[at_++]);
  }
  absl::StatusOr<int64_t> Int(const char* what) {
    STRAIT_ASSIGN_OR_RETURN(const uint32_t low, Word(what));
    STRAIT_ASSIGN_OR_RETURN(const uint32_t high, Word(what));
    return static_cast<int64_t>(uint64_t{low} | uint64_t{high} << 32);
  }
  absl::StatusOr<std::vector<float>> Floats(size_t count, const char* what) {
    if (in_.size() - at_ < count) return Short(what);
    std::vector<float> out(in_.begin() + at_, in_.begin() + at_ + count);
    at_ += count;
    return out;
  }
  bool done() const { return at_ == in_.size(); }

 private:
  absl::Status Short(const char* what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("outer state of ", in_.size(), " floats ends before its ", what));
  }
  std::span<const float> in_;
  size_t at_ = 0;
};

// Version 1: momentum, error feedback and, after a first round, the last mean; written at a
// round's end, so the start is the parameters and no round is pending.
absl::StatusOr<OuterState> ParseVersion1(std::span<const float> data, size_t n, int fragments) {
  OuterState state;
  state.momentum.assign(data.begin(), data.begin() + n);
  state.residual.assign(data.begin() + n, data.begin() + 2 * n);
  if (data.size() == 3 * n) {
    state.last_mean.assign(data.begin() + 2 * n, data.end());
  } else {
    state.last_mean.assign(n, 0.0f);
  }
  state.synced.assign(fragments, data.size() == 3 * n ? 1 : 0);
  return state;
}

}  // namespace

std::vector<float> SerializeOuterState(const OuterState& state) {
  Writer w;
  w.Word(kTag);
  w.Int(static_cast<int64_t>(state.momentum.size()));
  w.Word(static_cast<uint32_t>(state.synced.size()));
  w.Word(state.start.empty() ? 0 : 1);
  w.Word(static_cast<uint32_t>(state.pending.size()));
  w.Floats(state.momentum);
  w.Floats(state.residual);
  w.Floats(state.last_mean);
  w.Floats(state.start);
  for (uint8_t s : state.synced) w.Word(s);
  for (const PendingRound& p : state.pending) {
    w.Int(p.sent_at);
    w.Word(static_cast<uint32_t>(p.fragment));
    w.Floats(p.sent);
    w.Floats(p.local_at_send);
  }
  return w.Take();
}

absl::StatusOr<OuterState> ParseOuterState(std::span<const float> data, int64_t n64,
                                           int fragments) {
  const size_t n = static_cast<size_t>(n64);
  if (data.empty() || std::bit_cast<uint32_t>(data[0]) != kTag) {
    if (data.size() == 2 * n || data.size() == 3 * n) return ParseVersion1(data, n, fragments);
    return absl::InvalidArgumentError(
        absl::StrCat("outer state of ", data.size(), " floats for a stage of ", n, " parameters"));
  }
  Reader r(data.subspan(1));
  STRAIT_ASSIGN_OR_RETURN(const int64_t size, r.Int("size"));
  STRAIT_ASSIGN_OR_RETURN(const uint32_t parts, r.Word("fragment count"));
  STRAIT_ASSIGN_OR_RETURN(const uint32_t has_start, r.Word("start flag"));
  STRAIT_ASSIGN_OR_RETURN(const uint32_t pending, r.Word("pending count"));
  if (size != n64 || parts != static_cast<uint32_t>(fragments) || has_start > 1 ||
      pending > parts + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "outer state of ", size, " parameters in ", parts, " fragments (", pending,
        " rounds pending) for a stage of ", n, " parameters in ", fragments, " fragments"));
  }
  OuterState state;
  STRAIT_ASSIGN_OR_RETURN(state.momentum, r.Floats(n, "momentum"));
  STRAIT_ASSIGN_OR_RETURN(state.residual, r.Floats(n, "error feedback"));
  STRAIT_ASSIGN_OR_RETURN(state.last_mean, r.Floats(n, "last mean"));
  STRAIT_ASSIGN_OR_RETURN(state.start, r.Floats(has_start ? n : 0, "start"));
  for (uint32_t p = 0; p < parts; ++p) {
    STRAIT_ASSIGN_OR_RETURN(const uint32_t synced, r.Word("synced flags"));
    state.synced.push_back(synced != 0 ? 1 : 0);
  }
  for (uint32_t i = 0; i < pending; ++i) {
    PendingRound round;
    STRAIT_ASSIGN_OR_RETURN(round.sent_at, r.Int("pending round's step"));
    STRAIT_ASSIGN_OR_RETURN(const uint32_t fragment, r.Word("pending round's fragment"));
    if (fragment >= parts || round.sent_at < 0) {
      return absl::InvalidArgumentError(absl::StrCat("outer state: a pending round of fragment ",
                                                     fragment, " sent after step ", round.sent_at));
    }
    round.fragment = static_cast<int>(fragment);
    const size_t len = FragmentRange(n, fragments, round.fragment).size();
    STRAIT_ASSIGN_OR_RETURN(round.sent, r.Floats(len, "pending round's values"));
    STRAIT_ASSIGN_OR_RETURN(round.local_at_send, r.Floats(len, "pending round's parameters"));
    state.pending.push_back(std::move(round));
  }
  if (!r.done()) {
    return absl::InvalidArgumentError("outer state: floats left over after its last round");
  }
  return state;
}

}  // namespace strait::site
