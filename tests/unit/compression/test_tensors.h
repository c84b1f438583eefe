// Tensors shaped like real traffic, for the compression tests (deterministic for a seed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strait::compression::testing {

std::vector<float> Normal(size_t n, uint64_t seed, float stddev = 1.0f);
// ReLU(normal): about half zeros.
std::vector<float> Relu(size_t n, uint64_t seed);
// Bit pattern of every element, for bit-exact comparisons (NaN payloads included).
std::vector<uint32_t> Bits(const std::vector<float>& values);

}  // namespace strait::compression::testing
