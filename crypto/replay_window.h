// Sliding replay window over 64-bit sequence numbers (the idea of IPsec's anti-replay window,
// RFC 4303 §3.4.3): accepts each number at most once and tolerates reordering of up to `size`
// numbers below the highest one accepted.
#pragma once

#include <cstdint>
#include <vector>

namespace strait::crypto {

class ReplayWindow {
 public:
  enum class Verdict { kFresh, kReplayed, kTooOld };

  // `size` numbers below the highest accepted one are remembered; rounded up to a multiple of 64,
  // at least 64.
  explicit ReplayWindow(uint64_t size);

  // Whether `sequence` may be accepted now. Does not change the window: call Accept only after the
  // frame authenticated, so that forged frames cannot move the window.
  Verdict Check(uint64_t sequence) const;

  // Records `sequence` as seen. Precondition: Check(sequence) == kFresh.
  void Accept(uint64_t sequence);

  uint64_t size() const { return size_; }

 private:
  bool Seen(uint64_t sequence) const;

  uint64_t size_;
  bool any_ = false;      // Whether anything was accepted yet.
  uint64_t highest_ = 0;  // Highest accepted sequence number (valid when any_).
  std::vector<uint64_t>
      bits_;  // Bit (s % size_) is set when s in (highest_-size_, highest_] was seen.
};

}  // namespace strait::crypto
