#include "site/exchange/masked_sum.h"

#include <algorithm>
#include <cmath>

#include "crypto/pairwise_masks.h"

namespace strait::site {

int32_t SumFormat::bound() const {
  const int64_t largest = (int64_t{1} << (bits - 1)) - 1;
  return static_cast<int32_t>(largest / replicas);
}

SumFormat FixedPointSumFormat(int fixed_point_bits, int replicas) {
  return {.bits = 32, .replicas = replicas, .steps = {std::ldexp(1.0, -fixed_point_bits)}};
}

SumFormat OuterSumFormat(int bits, int fixed_point_bits, int replicas,
                         std::span<const float> last_mean) {
  if (bits == 32 || last_mean.empty()) return FixedPointSumFormat(fixed_point_bits, replicas);
  SumFormat format{.bits = bits, .replicas = replicas};
  const size_t blocks = (last_mean.size() + kSumBlock - 1) / kSumBlock;
  std::vector<double> largest(blocks, 0.0);
  double overall = 0.0;
  for (size_t i = 0; i < last_mean.size(); ++i) {
    const double v = std::fabs(static_cast<double>(last_mean[i]));
    if (std::isfinite(v)) largest[i / kSumBlock] = std::max(largest[i / kSumBlock], v);
  }
  for (double v : largest) overall = std::max(overall, v);
  const double floor = std::max(overall * 1e-3, 1e-30);
  for (double v : largest) format.steps.push_back((2.0 * v + floor) / format.bound());
  return format;
}

int64_t QuantizeForSum(std::span<const float> values, const SumFormat& format,
                       std::span<uint32_t> out) {
  int64_t clamped = 0;
  const size_t per_step = format.steps.size() == 1 ? values.size() : kSumBlock;
  for (size_t at = 0; at < values.size(); at += per_step) {
    const size_t n = std::min(per_step, values.size() - at);
    clamped += crypto::ToFixedPoint(values.subspan(at, n), 1.0 / format.step(at), format.bound(),
                                    out.subspan(at, n));
  }
  return clamped;
}

void DequantizeOwn(std::span<const uint32_t> q, const SumFormat& format, std::span<float> out) {
  for (size_t i = 0; i < q.size(); ++i) {
    out[i] = static_cast<float>(static_cast<int32_t>(q[i]) * format.step(i));
  }
}

size_t MaskedCount(size_t count, int bits) {
  const size_t lanes = static_cast<size_t>(32 / bits);
  return (count + lanes - 1) / lanes * lanes;
}

std::vector<uint32_t> PackLanes(std::span<const uint32_t> values, int bits) {
  if (bits == 32) return {values.begin(), values.end()};
  const int lanes = 32 / bits;
  const uint32_t mask = (uint32_t{1} << bits) - 1;
  std::vector<uint32_t> words((values.size() + lanes - 1) / lanes, 0);
  for (size_t i = 0; i < values.size(); ++i) {
    words[i / lanes] |= (values[i] & mask) << (bits * (i % lanes));
  }
  return words;
}

std::vector<uint32_t> UnpackLanes(std::span<const uint32_t> words, int bits, size_t count) {
  if (bits == 32) return {words.begin(), words.begin() + std::min(count, words.size())};
  const int lanes = 32 / bits;
  std::vector<uint32_t> values(std::min(count, words.size() * lanes));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t lane = words[i / lanes] >> (bits * (i % lanes));
    // Sign extension: the lane's top bit to bit 31, then an arithmetic shift back.
    values[i] = static_cast<uint32_t>(static_cast<int32_t>(lane << (32 - bits)) >> (32 - bits));
  }
  return values;
}

void MeanOfSum(std::span<const uint32_t> sum, const SumFormat& format, std::span<float> out) {
  for (size_t i = 0; i < sum.size(); ++i) {
    out[i] = static_cast<float>(static_cast<int32_t>(sum[i]) * format.step(i) / format.replicas);
  }
}

}  // namespace strait::site
