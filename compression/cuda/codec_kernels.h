// CUDA kernels for the value stages, so that a GPU site compresses before copying to the host.
// They write exactly the payload bytes the CPU stages write (same layout, same float_bits.h
// arithmetic), so frames are byte-identical. Every pointer is a device pointer; every call only
// enqueues work on `stream` (asynchronous) and returns launch errors.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace strait::compression {

// fp32 -> fp16 or bf16 bits, 2 bytes per value into `out` (2n bytes).
absl::Status CastToHalfOnDevice(const float* values, uint64_t n, bool bf16, uint8_t* out,
                                cudaStream_t stream);
// The inverse, from 2n bytes.
absl::Status CastFromHalfOnDevice(const uint8_t* in, uint64_t n, bool bf16, float* values,
                                  cudaStream_t stream);

// int8 (bits 8) or int4 (bits 4) with per-block absmax scales; `out` holds QuantizedSize(bits, n,
// block) bytes. `seed` is the stochastic-rounding seed (CodecChain::next_seed()).
absl::Status QuantizeOnDevice(const float* values, uint64_t n, int bits, int block, bool stochastic,
                              uint64_t seed, uint8_t* out, cudaStream_t stream);
// The inverse. The scales must be valid (the host checks frames before copying them over).
absl::Status DequantizeOnDevice(const uint8_t* in, uint64_t n, int bits, int block, float* values,
                                cudaStream_t stream);

// Top-k selection: writes the indices of the k largest magnitudes to `indices` (k entries,
// ascending; ties at the threshold go to the lowest indices, as on the CPU). Blocks: it reads
// histograms back to the host between passes. Uses temporary device memory.
absl::Status TopKIndicesOnDevice(const float* values, uint64_t n, uint64_t k, uint32_t* indices,
                                 cudaStream_t stream);

}  // namespace strait::compression
