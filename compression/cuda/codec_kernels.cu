#include <thrust/iterator/counting_iterator.h>

#include <array>
#include <cstring>
#include <cub/device/device_select.cuh>

#include "compression/cuda/codec_kernels.h"
#include "compression/float_bits.h"
#include "compression/quantize_stage.h"
#include "compression/topk_stage.h"
#include "core/library_check.h"
#include "core/status.h"

namespace strait::compression {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(uint64_t n) {
  uint64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 32 ? (blocks == 0 ? 1 : blocks) : 65535 * 32);
}

__global__ void CastToHalfKernel(const float* x, uint64_t n, bool bf16, uint8_t* out) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * blockDim.x) {
    uint16_t h = bf16 ? FloatToBf16Bits(x[i]) : FloatToHalfBits(x[i]);
    out[2 * i] = static_cast<uint8_t>(h);
    out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
}

__global__ void CastFromHalfKernel(const uint8_t* in, uint64_t n, bool bf16, float* y) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * blockDim.x) {
    uint16_t h = static_cast<uint16_t>(in[2 * i] | (in[2 * i + 1] << 8));
    y[i] = bf16 ? Bf16BitsToFloat(h) : HalfBitsToFloat(h);
  }
}

// One CUDA block per quantization block: a max-reduction finds the scale, then every thread
// quantizes a strided share of the block (pairs of values for int4).
__global__ void QuantizeKernel(const float* x, uint64_t n, int bits, int block, bool stochastic,
                               uint64_t seed, uint8_t* out) {
  __shared__ int32_t partial[kThreads];
  __shared__ QuantScale scale;
  const uint64_t blocks = BlockCount(n, block);
  const int32_t qmax = bits == 8 ? 127 : 7;
  for (uint64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const uint64_t first = b * block;
    const int m = static_cast<int>(min(uint64_t(block), n - first));
    int32_t amax = 0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) amax = max(amax, FiniteAbsBits(x[first + i]));
    partial[threadIdx.x] = amax;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
      if (threadIdx.x < s)
        partial[threadIdx.x] = max(partial[threadIdx.x], partial[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      scale = MakeQuantScale(partial[0], static_cast<float>(qmax));
      uint32_t bits_of_scale = FloatBits(scale.scale);
      for (int j = 0; j < 4; ++j) out[4 * b + j] = static_cast<uint8_t>(bits_of_scale >> (8 * j));
    }
    __syncthreads();
    uint8_t* codes = out + 4 * blocks;
    auto quantize = [&](uint64_t i, int32_t nan_code) {
      float noise = stochastic ? RoundingNoise(seed, i) : 0.0f;
      return QuantizeValue(x[i], scale, qmax, stochastic, noise, nan_code);
    };
    if (bits == 8) {
      for (int i = threadIdx.x; i < m; i += blockDim.x) {
        codes[first + i] = static_cast<uint8_t>(static_cast<int8_t>(quantize(first + i, -128)));
      }
    } else {
      for (int p = threadIdx.x; p < (m + 1) / 2; p += blockDim.x) {
        int32_t lo = quantize(first + 2 * p, -8);
        int32_t hi = 2 * p + 1 < m ? quantize(first + 2 * p + 1, -8) : 0;
        codes[first / 2 + p] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
      }
    }
    __syncthreads();  // `scale` and `partial` are reused by the next block
  }
}

__global__ void DequantizeKernel(const uint8_t* in, uint64_t n, int bits, int block, float* y) {
  const uint64_t blocks = BlockCount(n, block);
  const uint8_t* codes = in + 4 * blocks;
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * blockDim.x) {
    const uint64_t b = i / block;
    float scale = BitsFloat(in[4 * b] | (in[4 * b + 1] << 8) | (in[4 * b + 2] << 16) |
                            (uint32_t{in[4 * b + 3]} << 24));
    int32_t code, nan_code;
    if (bits == 8) {
      code = static_cast<int8_t>(codes[i]);
      nan_code = -128;
    } else {
      uint8_t byte = codes[i / 2];
      code = (i % 2 == 0) ? static_cast<int8_t>(byte << 4) >> 4 : static_cast<int8_t>(byte) >> 4;
      nan_code = -8;
    }
    y[i] = code == nan_code ? BitsFloat(0x7fc00000u) : Mul(static_cast<float>(code), scale);
  }
}

// Histogram of the next `digit_bits` bits of the magnitude keys that start with `prefix`.
__global__ void DigitHistogramKernel(const float* x, uint64_t n, uint32_t prefix, int shift,
                                     int digit_bits, unsigned long long* histogram) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * blockDim.x) {
    uint32_t key = MagnitudeKey(FloatBits(x[i]));
    if ((key >> (shift + digit_bits)) == prefix) {
      atomicAdd(&histogram[(key >> shift) & ((1u << digit_bits) - 1)], 1ull);
    }
  }
}

// Index predicate: above the threshold, or at it and not past the last kept tie.
struct Kept {
  const float* x;
  uint32_t threshold;
  uint64_t last_tie;  // indices of ties up to this one are kept; ~0 when only testing for ties
  bool ties_only;
  __device__ bool operator()(uint32_t i) const {
    uint32_t key = MagnitudeKey(FloatBits(x[i]));
    if (ties_only) return key == threshold;
    return key > threshold || (key == threshold && i <= last_tie);
  }
};

// cub::DeviceSelect::If from 0..n-1 into `out`; the selected count lands in *count (host).
absl::Status SelectIndices(const Kept& kept, uint64_t n, uint32_t* out, uint64_t* count,
                           cudaStream_t stream) {
  thrust::counting_iterator<uint32_t> first(0);
  uint64_t* d_count = nullptr;
  void* temp = nullptr;
  size_t temp_bytes = 0;
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cub::DeviceSelect::If(
      temp, temp_bytes, first, out, d_count, static_cast<int64_t>(n), kept, stream)));
  // The count goes after cub's scratch, at an 8-byte boundary (cub's size need not be one).
  const size_t count_offset = (temp_bytes + 7) & ~size_t{7};
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaMallocAsync(&temp, count_offset + 8, stream)));
  d_count = reinterpret_cast<uint64_t*>(static_cast<char*>(temp) + count_offset);
  cudaError_t error = cub::DeviceSelect::If(temp, temp_bytes, first, out, d_count,
                                            static_cast<int64_t>(n), kept, stream);
  if (error == cudaSuccess) {
    error = cudaMemcpyAsync(count, d_count, 8, cudaMemcpyDeviceToHost, stream);
  }
  if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
  cudaFreeAsync(temp, stream);
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(error));
  return absl::OkStatus();
}

}  // namespace

absl::Status CastToHalfOnDevice(const float* values, uint64_t n, bool bf16, uint8_t* out,
                                cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  CastToHalfKernel<<<Blocks(n), kThreads, 0, stream>>>(values, n, bf16, out);
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaGetLastError()));
  return absl::OkStatus();
}

absl::Status CastFromHalfOnDevice(const uint8_t* in, uint64_t n, bool bf16, float* values,
                                  cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  CastFromHalfKernel<<<Blocks(n), kThreads, 0, stream>>>(in, n, bf16, values);
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaGetLastError()));
  return absl::OkStatus();
}

absl::Status QuantizeOnDevice(const float* values, uint64_t n, int bits, int block, bool stochastic,
                              uint64_t seed, uint8_t* out, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  uint64_t blocks = BlockCount(n, block);
  unsigned grid = static_cast<unsigned>(blocks < 65535 * 32 ? blocks : 65535 * 32);
  QuantizeKernel<<<grid, kThreads, 0, stream>>>(values, n, bits, block, stochastic, seed, out);
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaGetLastError()));
  return absl::OkStatus();
}

absl::Status DequantizeOnDevice(const uint8_t* in, uint64_t n, int bits, int block, float* values,
                                cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  DequantizeKernel<<<Blocks(n), kThreads, 0, stream>>>(in, n, bits, block, values);
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaGetLastError()));
  return absl::OkStatus();
}

absl::Status TopKIndicesOnDevice(const float* values, uint64_t n, uint64_t k, uint32_t* indices,
                                 cudaStream_t stream) {
  if (k == 0) return absl::OkStatus();
  if (k > n || n > UINT32_MAX) return absl::InvalidArgumentError("topk: k > n or n >= 2^32");
  // The same radix select as the CPU (topk_stage.cc), with the histograms counted on the device.
  unsigned long long* d_histogram = nullptr;
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaMallocAsync(&d_histogram, 2048 * 8, stream)));
  std::array<unsigned long long, 2048> histogram;
  uint64_t need = k;
  uint32_t prefix = 0;
  int prefix_bits = 0;
  cudaError_t error = cudaSuccess;
  for (int digit_bits : {11, 10, 10}) {
    const int shift = 31 - prefix_bits - digit_bits;
    const uint32_t digits = 1u << digit_bits;
    error = cudaMemsetAsync(d_histogram, 0, digits * 8, stream);
    if (error != cudaSuccess) break;
    DigitHistogramKernel<<<Blocks(n), kThreads, 0, stream>>>(values, n, prefix, shift, digit_bits,
                                                             d_histogram);
    error =
        cudaMemcpyAsync(histogram.data(), d_histogram, digits * 8, cudaMemcpyDeviceToHost, stream);
    if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
    if (error != cudaSuccess) break;
    uint32_t digit = digits - 1;
    while (histogram[digit] < need) need -= histogram[digit--];
    prefix = (prefix << digit_bits) | digit;
    prefix_bits += digit_bits;
  }
  cudaFreeAsync(d_histogram, stream);
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(error));
  // Ties: the need-th tie in index order is the last one kept.
  uint32_t* d_ties = nullptr;
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaMallocAsync(&d_ties, n * 4, stream)));
  uint64_t tie_count = 0;
  uint32_t last_tie = 0;
  absl::Status status = SelectIndices(Kept{values, prefix, 0, true}, n, d_ties, &tie_count, stream);
  if (status.ok()) {
    error = cudaMemcpyAsync(&last_tie, d_ties + (need - 1), 4, cudaMemcpyDeviceToHost, stream);
    if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
  }
  cudaFreeAsync(d_ties, stream);
  STRAIT_RETURN_IF_ERROR(status);
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(error));
  uint64_t selected = 0;
  STRAIT_RETURN_IF_ERROR(
      SelectIndices(Kept{values, prefix, last_tie, false}, n, indices, &selected, stream));
  if (selected != k) return absl::InternalError("topk: selected count differs from k");
  return absl::OkStatus();
}

}  // namespace strait::compression
