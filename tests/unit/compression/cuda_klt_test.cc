// klt's transforms on a CUDA device (compression/cuda/klt_device.h) against the host's: the same
// products to a float's rounding, and klt chains that transform there code frames of the host's
// size and quality, which a host receiver decodes. Part of compression_cuda_test (exits 77,
// skipped, without a device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "compression/codec_chain.h"
#include "compression/cuda/klt_device.h"
#include "compression/klt_basis.h"
#include "compression/klt_math.h"

namespace strait::compression {
namespace {

// Rows of `width` values with a few strong directions, a mean and consecutive rows that follow
// from each other (a residual stream's shape).
std::vector<float> StreamRows(size_t rows, size_t width, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> mixing(width * 8), state(8, 0.0f), x(rows * width);
  for (float& v : mixing) v = normal(rng);
  for (size_t r = 0; r < rows; ++r) {
    for (float& s : state) s = 0.8f * s + 0.6f * normal(rng);
    for (size_t i = 0; i < width; ++i) {
      float v = 0.3f + 0.1f * normal(rng);
      for (size_t k = 0; k < 8; ++k) v += mixing[i * 8 + k] * state[k];
      x[r * width + i] = v;
    }
  }
  return x;
}

double Rms(const std::vector<float>& v) {
  double sum = 0;
  for (float x : v) sum += double{x} * x;
  return std::sqrt(sum / static_cast<double>(std::max<size_t>(v.size(), 1)));
}

// The largest difference of a and b (of the same size), over the rms of a.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double largest = 0;
  for (size_t i = 0; i < a.size(); ++i) largest = std::max(largest, std::abs(double{a[i]} - b[i]));
  return largest / Rms(a);
}

TEST(CudaKltMathTest, GivesTheHostsProductsAndTransforms) {
  for (const size_t width : {64, 256}) {
    const size_t rows = 700;
    const std::vector<float> x = StreamRows(rows, width, width);
    const std::unique_ptr<KltMath> host = MakeHostKltMath(), device = CudaKltMath(0)();
    std::vector<float> gram[2], lagged[2];
    for (int side = 0; side < 2; ++side) {
      KltMath& math = side == 0 ? *host : *device;
      gram[side].assign(width * width, 0.0f);
      lagged[side].assign(width * width, 0.0f);
      ASSERT_TRUE(math.LoadRows(x.data(), rows, width).ok());
      const absl::Status products = math.Products(gram[side].data(), lagged[side].data());
      ASSERT_TRUE(products.ok()) << products;
      for (size_t i = 0; i < width; ++i) {  // Only the upper triangle is specified.
        for (size_t j = 0; j < i; ++j) gram[side][i * width + j] = 0.0f;
      }
    }
    EXPECT_LT(RelativeError(gram[0], gram[1]), 1e-4) << width;
    EXPECT_LT(RelativeError(lagged[0], lagged[1]), 1e-4) << width;

    // A basis of a few directions (a floor), as a settled link fits it.
    CovarianceTracker tracker;
    tracker.Reset(width);
    ASSERT_TRUE(host->LoadRows(x.data(), rows, width).ok());
    ASSERT_TRUE(tracker.Add(x.data(), rows, *host).ok());
    absl::StatusOr<KltBasis> basis = tracker.Fit(1, {.floor = 0.1});
    ASSERT_TRUE(basis.ok()) << basis.status();
    ASSERT_LT(basis->rank, width);
    std::vector<float> z[2], back[2];
    for (int side = 0; side < 2; ++side) {
      KltMath& math = side == 0 ? *host : *device;
      z[side].assign(rows * basis->rank, 0.0f);
      back[side].assign(rows * width, 0.0f);
      ASSERT_TRUE(math.SetBasis(*basis).ok());
      ASSERT_TRUE(math.LoadRows(x.data(), rows, width).ok());
      ASSERT_TRUE(math.Forward(z[side].data()).ok());
      ASSERT_TRUE(math.Inverse(z[0].data(), rows, back[side].data()).ok());
    }
    EXPECT_LT(RelativeError(z[0], z[1]), 1e-4) << width;
    EXPECT_LT(RelativeError(back[0], back[1]), 1e-4) << width;
    EXPECT_LT(RelativeError(x, back[1]), 0.5) << width;  // The directions kept, and their rounding.
  }
}

// 200 frames of [256, 128]: the first fit (frame 4), the settled one with a predictor (frame 164,
// 160 frames later) and frames in each. The device's frames decode on the host to what the
// device's receiver makes of them, and they are as small and as good as the host's own.
TEST(CudaKltMathTest, ChainsTransformingOnTheDeviceCodeTheHostsFrames) {
  const size_t rows = 256, width = 128, frames = 200;
  const std::vector<uint64_t> shape = {rows, width};
  for (const char* spec : {"klt:0.12", "klt:0.45:dither", "klt:0.12+zstd"}) {
    auto host = CodecChain::Create(spec);
    auto device = CodecChain::Create(spec, {.klt_math = CudaKltMath(0)});
    ASSERT_TRUE(host.ok() && device.ok());
    TensorDecoder host_receiver, device_receiver({.klt_math = CudaKltMath(0)}), reference_receiver;
    double bytes[2] = {0, 0}, error[2] = {0, 0}, largest_difference = 0;
    for (size_t f = 0; f < frames; ++f) {
      const std::vector<float> x = StreamRows(rows, width, 1000 + f);
      absl::StatusOr<absl::Span<const uint8_t>> ours = (*device)->Encode(x, shape);
      ASSERT_TRUE(ours.ok()) << spec << " frame " << f << ": " << ours.status();
      const std::vector<uint8_t> frame(ours->begin(), ours->end());
      absl::StatusOr<absl::Span<const uint8_t>> theirs = (*host)->Encode(x, shape);
      ASSERT_TRUE(theirs.ok()) << theirs.status();
      DecodedTensor on_host, on_device, reference;
      ASSERT_TRUE(host_receiver.Decode(frame, &on_host).ok()) << spec << " frame " << f;
      ASSERT_TRUE(device_receiver.Decode(frame, &on_device).ok()) << spec << " frame " << f;
      ASSERT_TRUE(reference_receiver.Decode(*theirs, &reference).ok());
      largest_difference =
          std::max(largest_difference, RelativeError(on_host.values, on_device.values));
      bytes[0] += static_cast<double>(theirs->size());
      bytes[1] += static_cast<double>(frame.size());
      std::vector<float> e0(x.size()), e1(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        e0[i] = reference.values[i] - x[i];
        e1[i] = on_host.values[i] - x[i];
      }
      error[0] += Rms(e0);
      error[1] += Rms(e1);
    }
    EXPECT_LT(largest_difference, 1e-4) << spec;
    EXPECT_NEAR(bytes[1] / bytes[0], 1.0, 0.01) << spec;
    EXPECT_NEAR(error[1] / error[0], 1.0, 0.02) << spec;
  }
}

TEST(CudaKltMathTest, AMissingDeviceIsAnErrorThatSaysSo) {
  const std::unique_ptr<KltMath> math = CudaKltMath(4096)();
  const std::vector<float> x(64, 1.0f);
  const absl::Status loaded = math->LoadRows(x.data(), 1, 64);
  EXPECT_FALSE(loaded.ok());
  EXPECT_NE(loaded.message().find("cudaSetDevice"), std::string::npos) << loaded;
}

}  // namespace
}  // namespace strait::compression
