// klt:STEP[:sr][:fisher]: the range coder (round trips, near each column's entropy, hostile
// input), the basis a link learns (orthonormal, largest variance first), and the stage over a
// stream of frames: error within the step, fewer bytes once the basis arrives, a receiver that
// missed the basis refuses, fisher's noise away from where the gradients are.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "compression/codec_chain.h"
#include "compression/gradient_moments.h"
#include "compression/klt_basis.h"
#include "compression/rans_coder.h"

namespace strait::compression {
namespace {

std::vector<int32_t> Laplacian(size_t n, double scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> magnitude(1.0 / scale);
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    const double v = magnitude(rng) * (rng() & 1 ? 1 : -1);
    out[i] = static_cast<int32_t>(std::lround(v));
  }
  return out;
}

double EntropyBits(const std::vector<int32_t>& symbols) {
  std::map<int32_t, double> counts;
  for (int32_t s : symbols) counts[s] += 1;
  double bits = 0;
  for (const auto& [s, c] : counts) bits -= c * std::log2(c / symbols.size());
  return bits;
}

std::vector<int32_t> RoundTrip(const std::vector<int32_t>& symbols, size_t width,
                               size_t* bytes = nullptr) {
  RansCoder encoder, decoder;
  ByteBuffer coded;
  encoder.Encode(symbols, width, &coded, 0);
  EXPECT_LE(coded.size(), MaxCodedSize(symbols.size(), width));
  if (bytes) *bytes = coded.size();
  std::vector<int32_t> out(symbols.size());
  absl::Status status = decoder.Decode(coded.span(), width, absl::MakeSpan(out));
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

TEST(RansCoderTest, RoundTripsEveryShapeAndRange) {
  for (size_t width : {1, 5, 16, 20, 256}) {
    for (double scale : {0.01, 0.7, 3.0, 200.0, 1e6}) {
      std::vector<int32_t> symbols = Laplacian(width * 37, scale, width);
      EXPECT_EQ(RoundTrip(symbols, width), symbols) << width << " " << scale;
    }
  }
  std::vector<int32_t> extremes = {kMaxCodedSymbol, -kMaxCodedSymbol, 0, 1, -1, 15, 16, -16,
                                   1 << 20,         -(1 << 29),       7, 8};
  EXPECT_EQ(RoundTrip(extremes, 4), extremes);
  EXPECT_EQ(RoundTrip(std::vector<int32_t>(64, 0), 16), std::vector<int32_t>(64, 0));
  EXPECT_TRUE(RoundTrip({}, 8).empty());
}

TEST(RansCoderTest, CostsAboutTheEntropyOfEachColumn) {
  // Columns of spreads from 0.1 to 200, interleaved: one table for all would cost far more, and
  // tables by position would mix them.
  const size_t rows = 4096, width = 32;
  std::vector<int32_t> symbols(rows * width);
  double entropy = 0;
  for (size_t c = 0; c < width; ++c) {
    const double scale = 0.1 * std::pow(2.0, (c * 7) % width / 3.0);
    std::vector<int32_t> column = Laplacian(rows, scale, c);
    for (size_t r = 0; r < rows; ++r) symbols[r * width + c] = column[r];
    entropy += EntropyBits(column);
  }
  size_t bytes = 0;
  ASSERT_EQ(RoundTrip(symbols, width, &bytes), symbols);
  EXPECT_LT(8.0 * bytes, entropy * 1.02 + 0.08 * symbols.size())
      << 8.0 * bytes / symbols.size() << " bits a symbol, entropy " << entropy / symbols.size();
}

TEST(RansCoderTest, RefusesTruncatedAndAlteredStreams) {
  std::vector<int32_t> symbols = Laplacian(16 * 64, 30.0, 3);
  RansCoder encoder, decoder;
  ByteBuffer coded;
  encoder.Encode(symbols, 16, &coded, 0);
  std::vector<int32_t> out(symbols.size());
  for (size_t cut = 0; cut < coded.size(); ++cut) {
    EXPECT_FALSE(decoder.Decode(coded.span().subspan(0, cut), 16, absl::MakeSpan(out)).ok()) << cut;
  }
  std::vector<uint8_t> altered(coded.span().begin(), coded.span().end());
  int refused = 0;
  for (size_t i = 0; i < altered.size(); ++i) {
    altered[i] ^= 0x5a;
    refused += !decoder.Decode(altered, 16, absl::MakeSpan(out)).ok();
    altered[i] ^= 0x5a;
  }
  EXPECT_GT(refused, static_cast<int>(altered.size() / 2));  // the final state catches most
  std::vector<int32_t> wrong_count(symbols.size() + 16);
  EXPECT_FALSE(decoder.Decode(coded.span(), 16, absl::MakeSpan(wrong_count)).ok());
}

// Rows of x = A s + noise: `rank` strong directions in `width`, the rest weak.
std::vector<float> CorrelatedRows(size_t rows, size_t width, size_t rank, uint64_t seed) {
  std::mt19937_64 mixing(42), rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> a(width * rank);
  for (float& v : a) v = normal(mixing);
  std::vector<float> x(rows * width);
  for (size_t r = 0; r < rows; ++r) {
    std::vector<float> s(rank);
    for (float& v : s) v = normal(rng);
    for (size_t i = 0; i < width; ++i) {
      float v = 0.05f * normal(rng) + 0.5f;  // weak noise around a mean
      for (size_t k = 0; k < rank; ++k) v += a[i * rank + k] * s[k];
      x[r * width + i] = v;
    }
  }
  return x;
}

TEST(KltBasisTest, FitsOrthonormalDirectionsLargestFirst) {
  const size_t width = 24;
  CovarianceTracker tracker;
  tracker.Reset(width);
  std::vector<float> x = CorrelatedRows(2000, width, 3, 1);
  tracker.Add(x.data(), 1000);
  tracker.Add(x.data() + 1000 * width, 1000);
  absl::StatusOr<KltBasis> basis = tracker.Fit(7);
  ASSERT_TRUE(basis.ok()) << basis.status();
  EXPECT_EQ(basis->id, 7u);
  for (size_t a = 0; a < width; ++a) {
    for (size_t b = 0; b < width; ++b) {
      double dot = 0;
      for (size_t i = 0; i < width; ++i) {
        dot += double{basis->directions[a * width + i]} * basis->directions[b * width + i];
      }
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 0.02) << a << " " << b;
    }
  }
  std::vector<float> z(x.size());
  basis->Forward(x.data(), 2000, z.data());
  std::vector<double> variance(width, 0);
  for (size_t r = 0; r < 2000; ++r) {
    for (size_t i = 0; i < width; ++i) variance[i] += double{z[r * width + i]} * z[r * width + i];
  }
  EXPECT_GT(variance[2], 100 * variance[3]);  // three strong directions, then the noise
  for (size_t i = 1; i < width; ++i) EXPECT_LE(variance[i], variance[i - 1] * 1.05) << i;
  std::vector<float> back(x.size());
  basis->Inverse(z.data(), 2000, back.data());
  for (size_t i = 0; i < x.size(); i += 97) EXPECT_NEAR(back[i], x[i], 0.03) << i;
}

struct StreamResult {
  std::vector<size_t> bytes;        // per frame
  double worst_relative_error = 0;  // rms of the error / rms of the tensor, the worst frame
};

// Sends `frames` tensors of [rows, width] through `chain` and decodes each; the frames that
// `skip` names never reach the decoder.
StreamResult Stream(const std::string& chain_text, size_t frames, size_t rows, size_t width,
                    const std::vector<size_t>& skip = {}, absl::Status* failure = nullptr) {
  StreamResult result;
  auto chain = CodecChain::Create(chain_text);
  EXPECT_TRUE(chain.ok()) << chain.status();
  TensorDecoder decoder;
  auto lossless = *CodecChain::Create("none");
  for (size_t f = 0; f < frames; ++f) {
    std::vector<float> x = CorrelatedRows(rows, width, 4, 100 + f);
    auto frame = (*chain)->Encode(x, {rows, width});
    EXPECT_TRUE(frame.ok()) << frame.status();
    result.bytes.push_back(frame->size());
    if (std::find(skip.begin(), skip.end(), f) != skip.end()) continue;
    DecodedTensor out;
    absl::Status status = decoder.Decode(*frame, &out);
    if (!status.ok()) {
      if (failure) *failure = status;
      return result;
    }
    double error = 0, energy = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      error += double{out.values[i] - x[i]} * (out.values[i] - x[i]);
      energy += double{x[i]} * x[i];
    }
    result.worst_relative_error = std::max(result.worst_relative_error, std::sqrt(error / energy));
    // An exact frame between two klt frames must not cost the decoder its basis.
    DecodedTensor exact;
    EXPECT_TRUE(decoder.Decode(*lossless->Encode(x, {rows, width}), &exact).ok());
  }
  return result;
}

TEST(KltStageTest, LearnsTheBasisAndCodesWithinTheStep) {
  const size_t rows = 64, width = 32;
  StreamResult r = Stream("klt:0.1", 170, rows, width);
  ASSERT_EQ(r.bytes.size(), 170u);
  // Rounding to nearest: a uniform error of step / sqrt(12) = 0.029 rms, plus the bf16 basis.
  EXPECT_LT(r.worst_relative_error, 0.035);
  // Frame 3 carries the first basis (the covariance then holds 8 rows a column); the frames after
  // it, coded in it, are far smaller than the ones before (four strong directions, the rest
  // noise). The next basis comes 160 frames later.
  const size_t basis = 4 * width + 2 * width * width;
  EXPECT_GT(r.bytes[3], r.bytes[4] + basis);
  EXPECT_LT(r.bytes[10] * 3, r.bytes[1] * 2) << r.bytes[10] << " vs " << r.bytes[1];
  EXPECT_GT(r.bytes[163], r.bytes[164] + basis);
  for (size_t f = 4; f < 170; ++f) {
    if (f != 163) {
      EXPECT_LT(r.bytes[f], r.bytes[4] + basis) << f;
    }
  }

  StreamResult sr = Stream("klt:1:sr", 3, rows, width);  // stochastic: at most half a step rms
  EXPECT_LT(sr.worst_relative_error, 0.5);
}

TEST(KltStageTest, AReceiverThatMissedTheBasisRefuses) {
  absl::Status failure;
  // Rows of 16 in frames of 8: the first basis comes with frame 15 (128 rows).
  StreamResult r = Stream("klt:0.2", 20, 8, 16, /*skip=*/{15}, &failure);
  EXPECT_EQ(r.bytes.size(), 17u);  // the frame after the lost one is refused
  EXPECT_EQ(failure.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(failure.message().find("coded in basis 1, which this link has not received"),
            std::string::npos)
      << failure;
}

TEST(KltStageTest, RefusesRowsItCannotCode) {
  auto chain = *CodecChain::Create("klt:0.5");
  std::vector<float> wide(kMaxKltWidth + 2, 1.0f);
  auto frame = chain->Encode(wide, {kMaxKltWidth + 2});
  EXPECT_EQ(frame.status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> bad = {1.0f, NAN, 2.0f, 3.0f};
  EXPECT_FALSE(chain->Encode(bad, {2, 2}).ok());
  std::vector<float> zeros(32, 0.0f);
  auto zero_frame = chain->Encode(zeros, {4, 8});
  ASSERT_TRUE(zero_frame.ok()) << zero_frame.status();
  TensorDecoder decoder;
  DecodedTensor out;
  ASSERT_TRUE(decoder.Decode(*zero_frame, &out).ok());
  EXPECT_EQ(out.values, zeros);
}

TEST(GradientMomentsTest, TheMeanOfOuterProductsSinceTheLastTake) {
  GradientMoments moments;
  EXPECT_TRUE(moments.Take(2).empty());
  moments.Add(std::vector<float>{1, 2, 3, 4}, 2);  // rows (1, 2) and (3, 4)
  moments.Add(std::vector<float>{0, 2}, 2);
  const std::vector<double> expected = {10.0 / 3, 14.0 / 3, 14.0 / 3, 24.0 / 3};
  const std::vector<double> mean = moments.Take(2);
  ASSERT_EQ(mean.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(mean[i], expected[i], 1e-6) << i;
  EXPECT_TRUE(moments.Take(2).empty());  // forgotten
  moments.Add(std::vector<float>{1, 2, 3}, 3);
  EXPECT_TRUE(moments.Take(2).empty());  // rows of another width
  EXPECT_EQ(moments.Take(3).size(), 9u);
}

struct SplitError {
  double sensitive = 0, rest = 0;  // rms error a value: columns 0 and 1, the others
};

// Isotropic rows of 16 through `chain` (frames of 64 rows; its first basis comes with frame 1),
// with gradients along columns 0 and 1 only when `gradients`: the error of frames 4-23.
SplitError ErrorsWhereTheGradientsAre(const std::string& chain_text, bool gradients) {
  const size_t rows = 64, width = 16;
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  auto moments = std::make_shared<GradientMoments>();
  std::vector<float> g(rows * width, 0.0f);
  for (size_t r = 0; r < rows; ++r) {
    g[r * width] = 10 * normal(rng);
    g[r * width + 1] = 10 * normal(rng);
  }
  moments->Add(g, width);
  auto chain = *CodecChain::Create(chain_text, {.gradients = gradients ? moments : nullptr});
  TensorDecoder decoder;
  double sensitive = 0, rest = 0;
  for (size_t f = 0; f < 24; ++f) {
    std::vector<float> x(rows * width);
    for (float& v : x) v = normal(rng);
    auto frame = chain->Encode(x, {rows, width});
    EXPECT_TRUE(frame.ok()) << frame.status();
    DecodedTensor out;
    EXPECT_TRUE(decoder.Decode(*frame, &out).ok());
    if (f < 4) continue;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = double{out.values[i]} - x[i];
      (i % width < 2 ? sensitive : rest) += e * e;
    }
  }
  return {std::sqrt(sensitive / (20 * rows * 2)), std::sqrt(rest / (20 * rows * (width - 2)))};
}

// fisher: W = (G / its mean eigenvalue + I)^(1/2) is about diag(3, 3, 1, ...) here, so the error
// in columns 0 and 1 is about sqrt(2) / 3 of a plain basis's and elsewhere sqrt(2) times (the step
// is a fraction of the weighted coefficients' rms). Without gradients fisher is the plain basis.
TEST(KltStageTest, FisherPutsTheNoiseWhereTheGradientsAreSmall) {
  const SplitError plain = ErrorsWhereTheGradientsAre("klt:0.1", true);
  const SplitError fisher = ErrorsWhereTheGradientsAre("klt:0.1:fisher", true);
  EXPECT_LT(fisher.sensitive, 0.6 * plain.sensitive) << fisher.sensitive << " " << plain.sensitive;
  EXPECT_GT(fisher.rest, 1.2 * plain.rest) << fisher.rest << " " << plain.rest;
  EXPECT_LT(plain.sensitive, 0.04);  // the step / sqrt(12) = 0.029, plus bf16
  const SplitError alone = ErrorsWhereTheGradientsAre("klt:0.1:fisher", false);
  EXPECT_EQ(alone.sensitive, plain.sensitive);
  EXPECT_EQ(alone.rest, plain.rest);
}

}  // namespace
}  // namespace strait::compression
