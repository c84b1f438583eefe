#include "tests/unit/compression/test_tensors.h"

#include <cstring>
#include <random>

namespace strait::compression::testing {

std::vector<float> Normal(size_t n, uint64_t seed, float stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> Relu(size_t n, uint64_t seed) {
  std::vector<float> v = Normal(n, seed);
  for (float& x : v) x = x > 0 ? x : 0.0f;
  return v;
}

std::vector<uint32_t> Bits(const std::vector<float>& values) {
  std::vector<uint32_t> bits(values.size());
  if (!values.empty()) std::memcpy(bits.data(), values.data(), 4 * values.size());
  return bits;
}

}  // namespace strait::compression::testing
