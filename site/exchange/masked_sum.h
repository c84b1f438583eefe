// A replica's numbers in a secure sum (proto Purpose SUM; crypto/pairwise_masks.h): how its floats
// become the fixed-point integers it masks, how narrow integers pack into the 32-bit words the
// gateway adds lane by lane, and how the sum becomes the replicas' mean again.
//
// Values of `bits` bits (4, 8, 16 or 32) hold q = round(v / step), clamped to
// +-(2^(bits-1) - 1) / R so that the sum of R replicas' never overflows (4 bits: at most 7
// replicas); a word packs 32 / bits of them. The step is one
// for the whole vector (2^-training.fixed_point_bits, for 32 bits) or one per block of kSumBlock
// values (narrow values: the scales of int8-like quantisation, but the same on every replica, since
// the masks cancel only in a sum of numbers of one scale).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace strait::site {

inline constexpr int kSumBlock = 256;

struct SumFormat {
  int bits = 32;              // 4, 8, 16 or 32.
  int replicas = 2;           // R: the bound leaves room for the sum of R.
  std::vector<double> steps;  // One for the whole vector, or one per block of kSumBlock.
  int lanes() const { return 32 / bits; }
  int32_t bound() const;  // (2^(bits-1) - 1) / replicas.
  double step(size_t index) const {
    return steps.size() == 1 ? steps[0] : steps[index / kSumBlock];
  }
};

// 32-bit values with steps of 2^-fixed_point_bits: every-step gradients, and the first outer round.
SumFormat FixedPointSumFormat(int fixed_point_bits, int replicas);

// The format of an outer round's pseudo-gradient (training.outer.bits) over values whose last
// round's mean (public: every replica holds it) is `last_mean`: 32-bit fixed point with
// 2^-fixed_point_bits steps when there is none (the values' first round: nothing is known of them
// yet); else `bits`-bit values whose step in each block is twice the block's largest mean of the
// last round (plus a floor, a thousandth of the largest of all blocks, so that no block stays at
// zero) over the bound. A block that clamps then has twice the range the next round.
SumFormat OuterSumFormat(int bits, int fixed_point_bits, int replicas,
                         std::span<const float> last_mean);

// q of every value in two's complement, one per word (not yet packed); returns how many values
// were clamped (NaN counts, and becomes 0).
int64_t QuantizeForSum(std::span<const float> values, const SumFormat& format,
                       std::span<uint32_t> out);
// q * step: what the replica's share of the sum stands for (for error feedback).
void DequantizeOwn(std::span<const uint32_t> q, const SumFormat& format, std::span<float> out);

// How many values a vector of `count` masks: `count` rounded up to whole words, so that the padding
// lanes of the last word are masked too and every bit the gateway sees is a one-time pad's.
size_t MaskedCount(size_t count, int bits);
// The low `bits` of each value, 32 / bits a word (the first value in the lowest lane); the last
// word padded with zeros.
std::vector<uint32_t> PackLanes(std::span<const uint32_t> values, int bits);
// The inverse for `count` values, each lane sign-extended to 32 bits.
std::vector<uint32_t> UnpackLanes(std::span<const uint32_t> words, int bits, size_t count);

// The replicas' mean from the sum of their q (unpacked): sum * step / replicas.
void MeanOfSum(std::span<const uint32_t> sum, const SumFormat& format, std::span<float> out);

}  // namespace strait::site
