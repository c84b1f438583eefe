// Counter-based random numbers: every value is a pure function of (key, counter), so the numbers do
// not depend on the order in which they are drawn, on the split of the model or on the device.
// Used for parameter initialisation and dropout masks (no std:: distributions: their output is
// implementation-defined). Header-only; usable from CUDA kernels (compiled with nvcc).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define STRAIT_HOST_DEVICE __host__ __device__
#else
#define STRAIT_HOST_DEVICE
#endif

namespace strait::site {

// splitmix64's finaliser: a bijective 64-bit mix with good avalanche.
STRAIT_HOST_DEVICE inline uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// A new key from a key and one more coordinate, e.g. CombineKey(CombineKey(seed, layer), param).
STRAIT_HOST_DEVICE inline uint64_t CombineKey(uint64_t key, uint64_t value) {
  return Mix64(key ^ Mix64(value ^ 0x5851f42d4c957f2dull));
}

// Uniform in [0, 1) with 24 random bits (exactly representable as float).
STRAIT_HOST_DEVICE inline float CounterUniform(uint64_t key, uint64_t counter) {
  return static_cast<float>(CombineKey(key, counter) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace strait::site
