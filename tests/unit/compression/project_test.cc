// proj:K[:SEED]: the seeded basis (orthonormal, pinned, cached), the stage as a projection
// (decode(encode(x)) = U U^T x, self-adjoint, idempotent), its bytes, and hostile frames.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "compression/codec_chain.h"
#include "compression/project_stage.h"
#include "compression/seeded_basis.h"
#include "tests/unit/compression/test_tensors.h"

namespace strait::compression {
namespace {

std::shared_ptr<const Basis> MustBasis(uint64_t seed, uint64_t d, uint64_t k) {
  absl::StatusOr<std::shared_ptr<const Basis>> basis = SeededBasis(seed, d, k);
  EXPECT_TRUE(basis.ok()) << basis.status();
  return basis.ok() ? *basis : nullptr;
}

TEST(SeededBasisTest, ColumnsAreOrthonormal) {
  const uint64_t cases[][3] = {
      {1, 8, 4}, {kDefaultBasisSeed, 256, 112}, {7, 64, 64}, {3, 5, 1}, {9, 300, 17}};
  for (const auto& [seed, d, k] : cases) {
    std::shared_ptr<const Basis> basis = MustBasis(seed, d, k);
    ASSERT_NE(basis, nullptr);
    ASSERT_EQ(basis->u.size(), d * k);
    double worst = 0;
    for (uint64_t a = 0; a < k; ++a) {
      for (uint64_t b = 0; b < k; ++b) {
        double dot = 0;
        for (uint64_t i = 0; i < d; ++i) dot += double{basis->u[i * k + a]} * basis->u[i * k + b];
        worst = std::max(worst, std::abs(dot - (a == b ? 1.0 : 0.0)));
      }
    }
    EXPECT_LT(worst, 1e-6) << "seed " << seed << " d " << d << " K " << k;
    for (uint64_t i = 0; i < d; ++i) {
      for (uint64_t j = 0; j < k; ++j) ASSERT_EQ(basis->u[i * k + j], basis->u_t[j * d + i]);
    }
  }
}

// The first entries of U (row-major) for seed 1, d 8, K 4, as an independent implementation of
// the recipe computes them (Python: math.log/cos/sin, plain Gram-Schmidt in double, twice). The
// bits must be the same on every platform: a change here changes every proj frame on the wire.
TEST(SeededBasisTest, KnownAnswer) {
  std::shared_ptr<const Basis> basis = MustBasis(1, 8, 4);
  ASSERT_NE(basis, nullptr);
  const uint32_t want[] = {0xbc83dfcf, 0x3e2f983f, 0x3deff614, 0x3f15f98a,
                           0xbf1b73c4, 0xbec22fd8, 0xbecdcc92, 0x3e949b4d};
  for (size_t i = 0; i < 8; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &basis->u[i], 4);
    EXPECT_EQ(bits, want[i]) << "entry " << i << " = " << basis->u[i];
  }
  EXPECT_FLOAT_EQ(basis->u[0], -0.016097931f);
  const std::vector<double> normals = SeededNormals(1, 3);
  EXPECT_NEAR(normals[0], -0.028249746095854695, 1e-15);
  EXPECT_NEAR(normals[1], -1.065617648414326, 1e-15);
  EXPECT_NEAR(normals[2], -0.2279195228676347, 1e-15);
}

TEST(SeededBasisTest, NormalsAreStandard) {
  const std::vector<double> z = SeededNormals(5, 200001);  // odd: the last pair is cut
  double sum = 0, sum2 = 0;
  for (double x : z) sum += x, sum2 += x * x;
  EXPECT_NEAR(sum / z.size(), 0.0, 0.01);
  EXPECT_NEAR(sum2 / z.size(), 1.0, 0.01);
}

TEST(SeededBasisTest, CachedSharedAndThreadSafe) {
  std::shared_ptr<const Basis> a = MustBasis(11, 96, 40);
  EXPECT_EQ(MustBasis(11, 96, 40), a);  // the same object
  EXPECT_NE(MustBasis(12, 96, 40)->u, a->u);
  EXPECT_NE(MustBasis(11, 97, 40)->u[0], a->u[0]);
  std::vector<std::shared_ptr<const Basis>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&got, t] { got[t] = *SeededBasis(13, 128, 64); });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 1; t < 4; ++t) EXPECT_EQ(got[t]->u, got[0]->u);
}

TEST(SeededBasisTest, RefusesWhatCannotBeABasis) {
  EXPECT_THAT(std::string(SeededBasis(1, 8, 9).status().message()),
              ::testing::HasSubstr("proj:9 needs rows of at least 9 values; the tensor's rows "
                                   "have 8"));
  EXPECT_FALSE(SeededBasis(1, 8, 0).ok());
  EXPECT_FALSE(SeededBasis(1, 0, 1).ok());
  EXPECT_THAT(std::string(SeededBasis(1, kMaxBasisElements, 2).status().message()),
              ::testing::HasSubstr("above the limit"));
}

// Through a chain: encode then decode with `spec`, for values of `shape`.
std::vector<float> RoundTrip(const char* spec, const std::vector<float>& x,
                             std::vector<uint64_t> shape) {
  auto chain = *CodecChain::Create(spec);
  absl::StatusOr<absl::Span<const uint8_t>> frame = chain->Encode(x, shape);
  EXPECT_TRUE(frame.ok()) << spec << ": " << frame.status();
  if (!frame.ok()) return {};
  TensorDecoder decoder;
  DecodedTensor out;
  absl::Status decoded = decoder.Decode(*frame, &out);
  EXPECT_TRUE(decoded.ok()) << spec << ": " << decoded;
  EXPECT_EQ(out.shape, Shape(shape.begin(), shape.end()));
  return out.values;
}

// U U^T x per row, in double.
std::vector<double> ProjectReference(const Basis& basis, const std::vector<float>& x) {
  const uint64_t d = basis.rows, k = basis.cols;
  std::vector<double> out(x.size());
  for (uint64_t t = 0; t < x.size() / d; ++t) {
    for (uint64_t j = 0; j < k; ++j) {
      double c = 0;
      for (uint64_t i = 0; i < d; ++i) c += double{x[t * d + i]} * basis.u[i * k + j];
      for (uint64_t i = 0; i < d; ++i) out[t * d + i] += c * basis.u[i * k + j];
    }
  }
  return out;
}

double Dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double{a[i]} * b[i];
  return s;
}

TEST(ProjectStageTest, DecodeOfEncodeIsTheProjection) {
  const std::vector<float> x = testing::Normal(16 * 64, 1);
  const std::vector<float> p = RoundTrip("proj:24:5", x, {4, 4, 64});
  ASSERT_EQ(p.size(), x.size());
  const std::vector<double> want = ProjectReference(*MustBasis(5, 64, 24), x);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(p[i] - want[i]));
  EXPECT_LT(worst, 2e-6);
  // Not the identity: the rest of x is gone.
  EXPECT_GT(std::abs(Dot(x, x) - Dot(p, p)), 0.1 * Dot(x, x));
  // A rank-0 tensor is one row of width 1, and proj:K with K = d keeps everything.
  EXPECT_NEAR(RoundTrip("proj:1", {3.0f}, {})[0], 3.0f, 1e-6);
  const std::vector<float> full = RoundTrip("proj:64", x, {16, 64});
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(full[i], x[i], 1e-5) << i;
}

TEST(ProjectStageTest, SelfAdjointAndIdempotent) {
  const std::vector<float> x = testing::Normal(8 * 48, 2), y = testing::Normal(8 * 48, 3);
  const std::vector<float> px = RoundTrip("proj:20", x, {8, 48});
  const std::vector<float> py = RoundTrip("proj:20", y, {8, 48});
  const double pxy = Dot(px, y), xpy = Dot(x, py);
  EXPECT_NEAR(pxy, xpy, 1e-5 * std::sqrt(Dot(x, x) * Dot(y, y)));
  const std::vector<float> ppx = RoundTrip("proj:20", px, {8, 48});
  for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(ppx[i], px[i], 2e-6) << i;
}

TEST(ProjectStageTest, KernelsAreTheStage) {
  std::shared_ptr<const Basis> basis = MustBasis(kDefaultBasisSeed, 32, 10);
  const std::vector<float> x = testing::Normal(3 * 32, 4);
  std::vector<float> c(3 * 10), back(3 * 32);
  ProjectRows(x.data(), 3, *basis, c.data());
  UnprojectRows(c.data(), 3, *basis, back.data());
  EXPECT_EQ(testing::Bits(RoundTrip("proj:10", x, {3, 32})), testing::Bits(back));
  // Encoding is deterministic: the same frame twice, from two chains.
  auto a = *CodecChain::Create("proj:10+int4:10+zstd");
  auto b = *CodecChain::Create("proj:10+int4:10+zstd");
  absl::Span<const uint8_t> fa = *a->Encode(x, {3, 32});
  absl::Span<const uint8_t> fb = *b->Encode(x, {3, 32});
  EXPECT_TRUE(std::equal(fa.begin(), fa.end(), fb.begin(), fb.end()));
}

// The target: one microbatch of kjv-gpt's residual stream, [4 x 128, 256] fp32.
TEST(ProjectStageTest, SixteenTimesFewerBytes) {
  const std::vector<float> x = testing::Normal(512 * 256, 6);
  const double raw = 512.0 * 256 * 4;
  for (const char* spec : {"proj:112+int4:112", "proj:112+int4:112+zstd", "proj:96+int4:96+zstd"}) {
    auto chain = *CodecChain::Create(spec);
    absl::StatusOr<absl::Span<const uint8_t>> frame = chain->Encode(x, {512, 256});
    ASSERT_TRUE(frame.ok()) << frame.status();
    std::printf("%s on [512, 256] fp32: %zu bytes, %.2fx fewer\n", spec, frame->size(),
                raw / frame->size());
    EXPECT_GE(raw / frame->size(), 16.0) << spec;
  }
  // proj:112+int4:112: 56 bytes of codes and a 4-byte scale a row, and the header.
  auto chain = *CodecChain::Create("proj:112+int4:112");
  EXPECT_EQ(chain->Encode(x, {512, 256})->size(), 512u * 60 + FrameHeaderSize(2, chain->spec()));
}

// int4 on the coefficients adds its own error, about a tenth of them in rms (design D3); stochastic
// rounding more.
TEST(ProjectStageTest, QuantizedCoefficientsStayClose) {
  const std::vector<float> x = testing::Normal(64 * 256, 7);
  const std::vector<float> exact = RoundTrip("proj:112", x, {64, 256});
  for (const auto& [spec, most] : {std::pair{"proj:112+int4:112+zstd", 0.13},
                                   std::pair{"proj:112+int4:112:sr+shuffle+zstd", 0.2}}) {
    const std::vector<float> coded = RoundTrip(spec, x, {64, 256});
    ASSERT_EQ(coded.size(), exact.size());
    double err = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      err += (coded[i] - exact[i]) * double{coded[i] - exact[i]};
    }
    const double relative = std::sqrt(err / Dot(exact, exact));
    std::printf("%s: rms error %.3f of the projection's\n", spec, relative);
    EXPECT_LT(relative, most) << spec;
    EXPECT_GT(relative, 0.01) << spec;
  }
}

TEST(ProjectStageTest, EncodeRefusesRowsNarrowerThanK) {
  auto chain = *CodecChain::Create("proj:8");
  const std::vector<float> x = testing::Normal(24, 8);
  absl::StatusOr<absl::Span<const uint8_t>> frame = chain->Encode(x, {4, 6});
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(frame.status().message()),
              ::testing::HasSubstr("proj:8 needs rows of at least 8 values; the tensor's rows "
                                   "have 6"));
  EXPECT_FALSE(chain->Encode({}, {8, 0}).ok());
  EXPECT_TRUE(chain->Encode({}, {0, 8}).ok());  // no rows
  // Device coders do not run proj yet: a clear refusal, not a wrong frame.
  EXPECT_EQ(chain->EncodeValuePayload({}, {0, 8}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

void Put64(std::vector<uint8_t>& frame, size_t at, uint64_t v) { std::memcpy(&frame[at], &v, 8); }

TEST(ProjectStageTest, HostileFramesAreRefused) {
  auto chain = *CodecChain::Create("proj:4:77+int8:4");
  const std::vector<float> x = testing::Normal(16, 9);
  const absl::Span<const uint8_t> encoded = *chain->Encode(x, {2, 8});
  const std::vector<uint8_t> frame(encoded.begin(), encoded.end());
  // Layout: 16 fixed, dims at 16 and 24, proj's record at 32 (parameter at 34, size at 42, seed
  // at 50), int8's record at 58.
  const size_t dims = 16, proj = 32;
  TensorDecoder decoder;
  DecodedTensor out;
  ASSERT_TRUE(decoder.Decode(frame, &out).ok());
  EXPECT_EQ(out.chain.stages[0].basis_seed, 77u);
  DecodedPayload payload;
  EXPECT_EQ(decoder.DecodeValuePayload(frame, &payload).code(),
            absl::StatusCode::kFailedPrecondition);

  auto expect_error = [&](const std::vector<uint8_t>& bad, const char* what) {
    absl::Status status = decoder.Decode(bad, &out);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << what << ": " << status;
  };
  for (size_t len = 0; len < frame.size(); ++len) {
    expect_error(std::vector<uint8_t>(frame.begin(), frame.begin() + len), "truncated");
  }
  auto bad = frame;
  Put64(bad, dims, 8), Put64(bad, dims + 8, 2);  // [8, 2]: rows narrower than K
  expect_error(bad, "K > d");
  bad = frame;
  Put64(bad, dims, 4), Put64(bad, dims + 8, 4);  // [4, 4]: 4 rows, the payload holds 2
  expect_error(bad, "rows vs payload");
  bad = frame;
  Put64(bad, proj + 2, 9);  // K = 9 > d = 8
  expect_error(bad, "K = 9");
  bad = frame;
  Put64(bad, proj + 2, 0);
  expect_error(bad, "K = 0");
  bad = frame;
  Put64(bad, proj + 2, 2);  // int8's block is then not K
  expect_error(bad, "block != K");
  bad = frame;
  Put64(bad, dims, 1), Put64(bad, dims + 8, 16);  // [1, 16]: one row, 16 * 4 coefficients?
  expect_error(bad, "one wide row");
  bad = frame;
  Put64(bad, dims, 1), Put64(bad, dims + 8, uint64_t{1} << 24), Put64(bad, 8, uint64_t{1} << 26);
  expect_error(bad, "basis over the limit");
  bad = frame;
  bad[proj] = 9;
  expect_error(bad, "unknown kind");
  bad = frame;
  Put64(bad, proj + 18, 78);  // another seed decodes (to other values): nothing can tell
  ASSERT_TRUE(decoder.Decode(bad, &out).ok());
  EXPECT_EQ(out.chain.stages[0].basis_seed, 78u);
  for (size_t i = 0; i < frame.size(); ++i) {  // any Status; ASan/UBSan catch the rest
    for (int bit = 0; bit < 8; ++bit) {
      bad = frame;
      bad[i] ^= static_cast<uint8_t>(1 << bit);
      (void)decoder.Decode(bad, &out);
    }
  }
}

}  // namespace
}  // namespace strait::compression
