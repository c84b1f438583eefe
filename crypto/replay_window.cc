#include "crypto/replay_window.h"

#include <algorithm>

namespace strait::crypto {

ReplayWindow::ReplayWindow(uint64_t size)
    : size_(std::max<uint64_t>(64, (size + 63) / 64 * 64)), bits_(size_ / 64, 0) {}

bool ReplayWindow::Seen(uint64_t sequence) const {
  const uint64_t bit = sequence % size_;
  return (bits_[bit / 64] >> (bit % 64)) & 1;
}

ReplayWindow::Verdict ReplayWindow::Check(uint64_t sequence) const {
  if (!any_ || sequence > highest_) return Verdict::kFresh;
  if (highest_ - sequence >= size_) return Verdict::kTooOld;
  return Seen(sequence) ? Verdict::kReplayed : Verdict::kFresh;
}

void ReplayWindow::Accept(uint64_t sequence) {
  if (!any_ || sequence > highest_) {
    // Forget the numbers that fall out of the window: those in (old highest, sequence] reuse their
    // bits, which must start cleared.
    const uint64_t advance = any_ ? sequence - highest_ : size_;
    if (advance >= size_) {
      std::fill(bits_.begin(), bits_.end(), 0);
    } else {
      for (uint64_t s = highest_ + 1; s != sequence + 1; ++s) {
        const uint64_t bit = s % size_;
        bits_[bit / 64] &= ~(uint64_t{1} << (bit % 64));
      }
    }
    highest_ = sequence;
    any_ = true;
  }
  const uint64_t bit = sequence % size_;
  bits_[bit / 64] |= uint64_t{1} << (bit % 64);
}

}  // namespace strait::crypto
