// The CUDA kernels against the CPU: byte-identical frames for casts and quantizers, the same values
// when decoding, the same top-k indices. Exits 77 (skipped) where no CUDA device is present.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <vector>

#include "compression/codec_chain.h"
#include "compression/cuda/codec_kernels.h"
#include "compression/cuda/device_codec.h"
#include "compression/float_bits.h"
#include "compression/quantize_stage.h"
#include "compression/topk_stage.h"
#include "tests/unit/compression/test_tensors.h"

namespace strait::compression {
namespace {

// Runs before gtest's main: without a device there is nothing to test.
const bool kHaveDevice = [] {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "no CUDA device: compression_cuda_test skipped\n");
    std::_Exit(77);
  }
  return true;
}();

template <typename T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<size_t>(n, 1) * sizeof(T)),
              cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  T* ptr = nullptr;
};

std::vector<float> Awkward(size_t n, uint64_t seed) {
  std::vector<float> v = testing::Normal(n, seed);
  const float specials[] = {NAN,
                            INFINITY,
                            -INFINITY,
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(),
                            -0.0f,
                            1e-40f,
                            65520.0f};
  for (size_t i = 0; i < n && i < 8; ++i) v[i * 37 % n] = specials[i];
  for (size_t i = 512; i < std::min<size_t>(n, 768); ++i) v[i] *= 1e-42f;  // a denormal block
  return v;
}

TEST(CudaCodecTest, FramesAreByteIdenticalToTheCpu) {
  for (const char* spec : {"none", "fp16", "bf16", "int8", "int4", "int8:64:sr", "int4:2:sr",
                           "int8+zstd", "bf16+shuffle+zstd"}) {
    for (size_t n : {1, 2, 257, 1000, 100003}) {
      std::vector<float> v = Awkward(n, n);
      auto cpu = *CodecChain::Create(spec);
      auto gpu = *CodecChain::Create(spec);
      DeviceBuffer<float> d(n);
      ASSERT_EQ(cudaMemcpy(d.ptr, v.data(), 4 * n, cudaMemcpyHostToDevice), cudaSuccess);
      for (int call = 0; call < 2; ++call) {  // the second call draws new rounding noise
        absl::Span<const uint8_t> a = *cpu->Encode(v, {n});
        std::vector<uint8_t> expected(a.begin(), a.end());
        absl::StatusOr<absl::Span<const uint8_t>> b = EncodeOnDevice(*gpu, d.ptr, {n}, nullptr);
        ASSERT_TRUE(b.ok()) << b.status();
        ASSERT_EQ(std::vector<uint8_t>(b->begin(), b->end()), expected) << spec << " n=" << n;
      }
    }
  }
}

TEST(CudaCodecTest, DeviceDecodeMatchesTheCpu) {
  for (const char* spec : {"fp16", "bf16", "int8", "int4:6", "int4"}) {
    for (size_t n : {1, 257, 100003}) {
      std::vector<float> v = Awkward(n, n + 1);
      auto chain = *CodecChain::Create(spec);
      const StageSpec stage = chain->spec().stages[0];
      absl::Span<const uint8_t> frame = *chain->Encode(v, {n});
      DecodedTensor expected;
      ASSERT_TRUE(chain->Decode(frame, &expected).ok());
      const size_t header = FrameHeaderSize(1, 1);
      const size_t payload = frame.size() - header;
      DeviceBuffer<uint8_t> d_in(payload);
      DeviceBuffer<float> d_out(n);
      ASSERT_EQ(cudaMemcpy(d_in.ptr, frame.data() + header, payload, cudaMemcpyHostToDevice),
                cudaSuccess);
      absl::Status s = stage.kind == StageKind::kFp16 || stage.kind == StageKind::kBf16
                           ? CastFromHalfOnDevice(d_in.ptr, n, stage.kind == StageKind::kBf16,
                                                  d_out.ptr, nullptr)
                           : DequantizeOnDevice(d_in.ptr, n, stage.kind == StageKind::kInt8 ? 8 : 4,
                                                stage.block_size, d_out.ptr, nullptr);
      ASSERT_TRUE(s.ok()) << s;
      std::vector<float> got(n);
      ASSERT_EQ(cudaMemcpy(got.data(), d_out.ptr, 4 * n, cudaMemcpyDeviceToHost), cudaSuccess);
      for (size_t i = 0; i < n; ++i) {
        if (std::isnan(expected.values[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << spec << " " << i;
        } else {
          ASSERT_EQ(FloatBits(got[i]), FloatBits(expected.values[i])) << spec << " " << i;
        }
      }
    }
  }
}

TEST(CudaCodecTest, TopKSelectsTheCpuIndices) {
  for (size_t n : {1, 100, 1000, 1 << 20}) {
    for (double fraction : {0.01, 0.5, 1.0}) {
      std::vector<float> v = Awkward(n, n + 2);
      for (size_t i = 0; i < n; i += 5) v[i] = 0.5f;  // many ties
      const uint64_t k = TopKCount(n, fraction);
      std::vector<uint32_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
        return MagnitudeKey(FloatBits(v[a])) > MagnitudeKey(FloatBits(v[b]));
      });
      order.resize(k);
      std::sort(order.begin(), order.end());
      DeviceBuffer<float> d(n);
      DeviceBuffer<uint32_t> d_idx(k);
      ASSERT_EQ(cudaMemcpy(d.ptr, v.data(), 4 * n, cudaMemcpyHostToDevice), cudaSuccess);
      absl::Status s = TopKIndicesOnDevice(d.ptr, n, k, d_idx.ptr, nullptr);
      ASSERT_TRUE(s.ok()) << s;
      std::vector<uint32_t> got(k);
      ASSERT_EQ(cudaMemcpy(got.data(), d_idx.ptr, 4 * k, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(got, order) << "n=" << n << " fraction=" << fraction;
    }
  }
}

}  // namespace
}  // namespace strait::compression
