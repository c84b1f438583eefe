// klt:STEP[:sr|:dither][:fisher]: the range coder (round trips, near each column's entropy, hostile
// input), the basis a link learns (orthonormal, largest variance first, the directions above a
// floor, a predictor from the row before), and the stage over a stream of frames: error within the
// step, fewer bytes once the basis arrives and once it leaves out the weak directions or predicts,
// forged bases and a receiver that missed the basis refused, fisher's noise away from where the
// gradients are.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "compression/codec_chain.h"
#include "compression/codec_stage.h"
#include "compression/gradient_moments.h"
#include "compression/klt_basis.h"
#include "compression/klt_math.h"
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

// Streams of the same statistics: the second reuses the first's tables, leaving them out, and a
// decoder that holds them decodes it; one that does not refuses it, and a stream whose tokens the
// kept tables do not cover brings its own.
TEST(RansCoderTest, ReusesTheLastTablesWhenTheyFit) {
  const size_t width = 16;
  const std::vector<int32_t> first = Laplacian(64 * width, 3.0, 1),
                             second = Laplacian(64 * width, 3.0, 2),
                             wider = Laplacian(64 * width, 3000.0, 3);
  RansCoder encoder, fresh_encoder, decoder, fresh_decoder;
  ByteBuffer a, b, b_alone, c;
  EXPECT_FALSE(encoder.Encode(first, width, &a, 0, /*may_reuse=*/true));  // nothing kept yet
  EXPECT_TRUE(encoder.Encode(second, width, &b, 0, /*may_reuse=*/true));
  EXPECT_FALSE(fresh_encoder.Encode(second, width, &b_alone, 0, /*may_reuse=*/true));
  EXPECT_LT(b.size() + 20, b_alone.size()) << b.size() << " vs " << b_alone.size();
  EXPECT_FALSE(encoder.Encode(wider, width, &c, 0, /*may_reuse=*/true));

  std::vector<int32_t> out(first.size());
  ASSERT_TRUE(decoder.Decode(a.span(), width, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, first);
  absl::Status refused = fresh_decoder.Decode(b.span(), width, absl::MakeSpan(out), true);
  EXPECT_NE(refused.message().find("tables this decoder does not hold"), std::string::npos)
      << refused;
  EXPECT_FALSE(decoder.Decode(b.span(), width / 2, absl::MakeSpan(out), true).ok());  // width
  ASSERT_TRUE(decoder.Decode(b.span(), width, absl::MakeSpan(out), true).ok());
  EXPECT_EQ(out, second);
  ASSERT_TRUE(decoder.Decode(c.span(), width, absl::MakeSpan(out)).ok());
  EXPECT_EQ(out, wider);
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

// Adds `rows` rows at x to `tracker`, multiplied by the host's BLAS.
void AddRows(CovarianceTracker& tracker, const float* x, size_t rows) {
  const std::unique_ptr<KltMath> math = MakeHostKltMath();
  ASSERT_TRUE(math->LoadRows(x, rows, tracker.width()).ok());
  ASSERT_TRUE(tracker.Add(x, rows, *math).ok());
}

// z = (x - mean) analysis^T of `rows` rows in `basis`, and back, with the host's BLAS.
std::vector<float> Forward(const KltBasis& basis, const float* x, size_t rows) {
  const std::unique_ptr<KltMath> math = MakeHostKltMath();
  std::vector<float> z(rows * basis.rank);
  EXPECT_TRUE(math->SetBasis(basis).ok());
  EXPECT_TRUE(math->LoadRows(x, rows, basis.width).ok());
  EXPECT_TRUE(math->Forward(z.data()).ok());
  return z;
}
std::vector<float> Inverse(const KltBasis& basis, const float* z, size_t rows) {
  const std::unique_ptr<KltMath> math = MakeHostKltMath();
  std::vector<float> x(rows * basis.width);
  EXPECT_TRUE(math->SetBasis(basis).ok());
  EXPECT_TRUE(math->Inverse(z, rows, x.data()).ok());
  return x;
}

TEST(KltBasisTest, FitsOrthonormalDirectionsLargestFirst) {
  const size_t width = 24;
  CovarianceTracker tracker;
  tracker.Reset(width);
  std::vector<float> x = CorrelatedRows(2000, width, 3, 1);
  AddRows(tracker, x.data(), 1000);
  AddRows(tracker, x.data() + 1000 * width, 1000);
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
  const std::vector<float> z = Forward(*basis, x.data(), 2000);
  std::vector<double> variance(width, 0);
  for (size_t r = 0; r < 2000; ++r) {
    for (size_t i = 0; i < width; ++i) variance[i] += double{z[r * width + i]} * z[r * width + i];
  }
  EXPECT_GT(variance[2], 100 * variance[3]);  // three strong directions, then the noise
  for (size_t i = 1; i < width; ++i) EXPECT_LE(variance[i], variance[i - 1] * 1.05) << i;
  std::vector<float> back = Inverse(*basis, z.data(), 2000);
  for (size_t i = 0; i < x.size(); i += 97) EXPECT_NEAR(back[i], x[i], 0.03) << i;

  // Above a floor of 1% of the mean variance: the three strong directions (the noise's variance,
  // 0.0025, is about 1/1000 of the mean), which reconstruct x up to the noise.
  AddRows(tracker, x.data(), 2000);
  absl::StatusOr<KltBasis> kept = tracker.Fit(8, {.floor = 0.01});
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->rank, 3u);
  EXPECT_EQ(kept->directions.size(), 3 * width);
  back = Inverse(*kept, Forward(*kept, x.data(), 2000).data(), 2000);
  for (size_t i = 0; i < x.size(); i += 97) EXPECT_NEAR(back[i], x[i], 0.25) << i;
}

// Rows of `width` columns, each column a sequence x_t = rho x_(t-1) + noise of its own scale; in
// random order (no row follows from the one before) when `shuffled`.
std::vector<float> SequenceRows(size_t rows, size_t width, double rho, bool shuffled,
                                uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<float> x(rows * width);
  std::vector<double> state(width, 0.0);
  for (size_t r = 0; r < rows + 50; ++r) {  // 50 rows to forget the start
    for (size_t i = 0; i < width; ++i) {
      state[i] = rho * state[i] + std::sqrt(1 - rho * rho) * normal(rng);
      if (r >= 50) x[(r - 50) * width + i] = static_cast<float>((1.0 + i) * state[i]);
    }
  }
  if (shuffled) {
    std::vector<size_t> order(rows);
    for (size_t r = 0; r < rows; ++r) order[r] = r;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<float> y(x.size());
    for (size_t r = 0; r < rows; ++r) {
      std::copy_n(&x[order[r] * width], width, &y[r * width]);
    }
    x = std::move(y);
  }
  return x;
}

// Each column follows from the row before with rho = 0.9: the predictor is about 0.9 I in any
// basis of these columns (the lag-one covariance is 0.9 times the covariance; off the diagonal,
// sampling noise of 4,000 rows, larger where a small coefficient predicts a large one); rows in
// random order carry no predictor (it would save less than it costs).
TEST(KltBasisTest, PredictsARowFromTheOneBefore) {
  const size_t width = 12;
  for (bool shuffled : {false, true}) {
    CovarianceTracker tracker;
    tracker.Reset(width);
    for (uint64_t part = 0; part < 4; ++part) {
      std::vector<float> x = SequenceRows(1000, width, 0.9, shuffled, part);
      AddRows(tracker, x.data(), 1000);
    }
    absl::StatusOr<KltBasis> basis = tracker.Fit(1, {.noise = 1e-4, .predicted_rows = 20000});
    ASSERT_TRUE(basis.ok()) << basis.status();
    if (shuffled) {
      EXPECT_TRUE(basis->predictor.empty());
      continue;
    }
    ASSERT_EQ(basis->predictor.size(), width * width);
    for (size_t a = 0; a < width; ++a) {
      for (size_t b = 0; b < width; ++b) {
        EXPECT_NEAR(basis->predictor[a * width + b], a == b ? 0.9 : 0.0, a == b ? 0.04 : 0.15)
            << a << " " << b;
      }
    }
  }
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
  // Rounding to nearest: a uniform error of step / sqrt(12) = 0.029 rms, plus the rounded basis
  // and, after the refit, the weak directions left out (0.023 rms).
  EXPECT_LT(r.worst_relative_error, 0.035);
  // Frame 3 carries the first basis (the covariance then holds 8 rows a column), of every
  // direction (at least a byte a value); the frames after it, coded in it, are far smaller than
  // the ones before (four strong directions, the rest noise).
  const size_t full_basis = width * width;
  EXPECT_GT(r.bytes[3], r.bytes[4] + full_basis);
  EXPECT_LT(r.bytes[10] * 3, r.bytes[1] * 2) << r.bytes[10] << " vs " << r.bytes[1];
  // The next basis comes 160 frames later, fitted on 320 rows a column: the noise's directions
  // (variance 0.0025) are below the water level (0.1^2 / 12 of the mean variance, 4.3), so it
  // keeps the four strong ones, and the frames coded in it no longer code the noise.
  EXPECT_GT(r.bytes[163], r.bytes[164]);
  EXPECT_LT(r.bytes[163], r.bytes[4] + full_basis / 2);
  size_t before = 0, after = 0;
  for (size_t f = 0; f < 6; ++f) {
    before += r.bytes[157 + f];
    after += r.bytes[164 + f];
  }
  EXPECT_LT(after * 10, before * 9) << after << " vs " << before;
  for (size_t f = 4; f < 170; ++f) {
    if (f != 163) {
      EXPECT_LT(r.bytes[f], r.bytes[4] + full_basis) << f;
    }
  }

  // Stochastic rounding keeps every direction (unbiased): at most half a step rms.
  StreamResult sr = Stream("klt:1:sr", 170, rows, width);
  EXPECT_LT(sr.worst_relative_error, 0.5);
  EXPECT_GT(sr.bytes[163], sr.bytes[164] + full_basis);
}

// Stochastic rounding with the noise subtracted where it leaves less error: the strong columns
// (about 2.8 steps rms) get step^2 / 12 where stochastic rounding leaves step^2 / 6; the noise's
// columns (0.02 of a step) stay stochastically rounded (subtracting there would leave step^2 / 12
// each, twice what the whole tensor gets from stochastic rounding). The symbols are stochastic
// rounding's: the same bytes but for the seed and the column bits. Still unbiased: the same
// tensor sent 150 times decodes on average within a sixth of one frame's error (1/sqrt(150) when
// unbiased).
// The host's KltMath, counting the products it is asked for.
class CountingMath final : public KltMath {
 public:
  explicit CountingMath(int* calls) : calls_(calls) {}
  absl::Status SetBasis(const KltBasis& basis) override { return host_->SetBasis(basis); }
  absl::Status LoadRows(const float* x, size_t rows, size_t width) override {
    return host_->LoadRows(x, rows, width);
  }
  absl::Status Products(float* gram, float* lagged) override {
    ++*calls_;
    return host_->Products(gram, lagged);
  }
  absl::Status Forward(float* z) override {
    ++*calls_;
    return host_->Forward(z);
  }
  absl::Status Inverse(const float* z, size_t rows, float* x) override {
    ++*calls_;
    return host_->Inverse(z, rows, x);
  }

 private:
  int* const calls_;
  const std::unique_ptr<KltMath> host_ = MakeHostKltMath();
};

// CodecOptions::klt_math is where both ends multiply (a GPU site's cuBLAS,
// compression_cuda_test): each frame's products and transforms go through it, and with the
// host's own products the frames and values are the default's, byte for byte.
TEST(KltStageTest, TransformsWithTheMathItIsGiven) {
  const size_t rows = 64, width = 32;
  int sent = 0, received = 0;
  auto counted = CodecChain::Create(
      "klt:0.1", {.klt_math = [&sent] { return std::make_unique<CountingMath>(&sent); }});
  auto plain = CodecChain::Create("klt:0.1");
  ASSERT_TRUE(counted.ok() && plain.ok());
  TensorDecoder counting_receiver(
      {.klt_math = [&received] { return std::make_unique<CountingMath>(&received); }});
  TensorDecoder receiver;
  for (size_t f = 0; f < 10; ++f) {
    const std::vector<float> x = CorrelatedRows(rows, width, 4, 300 + f);
    auto frame = (*counted)->Encode(x, {rows, width});
    ASSERT_TRUE(frame.ok()) << frame.status();
    const std::vector<uint8_t> ours(frame->begin(), frame->end());
    auto theirs = (*plain)->Encode(x, {rows, width});
    ASSERT_TRUE(theirs.ok());
    EXPECT_EQ(ours, std::vector<uint8_t>(theirs->begin(), theirs->end())) << f;
    DecodedTensor a, b;
    ASSERT_TRUE(counting_receiver.Decode(ours, &a).ok());
    ASSERT_TRUE(receiver.Decode(ours, &b).ok());
    EXPECT_EQ(a.values, b.values) << f;
  }
  // Products for each frame, a transform from the fourth (the first basis) on; the inverse of
  // each frame in a basis.
  EXPECT_EQ(sent, 10 + 7);
  EXPECT_EQ(received, 7);
}

TEST(KltStageTest, DitherIsUnbiasedWithLessErrorThanStochasticRounding) {
  const size_t rows = 64, width = 32, frames = 160, first = 10;
  const std::vector<float> x = CorrelatedRows(rows, width, 4, 7);
  double error[2] = {0, 0}, mean_error = 0, energy = 0;
  size_t bytes[2] = {0, 0};
  for (bool dither : {false, true}) {
    auto chain = *CodecChain::Create(dither ? "klt:1:dither" : "klt:1:sr");
    TensorDecoder decoder;
    std::vector<double> sum(x.size(), 0.0);
    for (size_t f = 0; f < frames; ++f) {
      auto frame = chain->Encode(x, {rows, width});
      ASSERT_TRUE(frame.ok()) << frame.status();
      DecodedTensor out;
      ASSERT_TRUE(decoder.Decode(*frame, &out).ok());
      if (f < first) continue;
      bytes[dither] += frame->size();
      for (size_t i = 0; i < x.size(); ++i) {
        error[dither] += double{out.values[i] - x[i]} * (out.values[i] - x[i]);
        sum[i] += out.values[i];
      }
    }
    if (!dither) continue;
    for (size_t i = 0; i < x.size(); ++i) {
      const double bias = sum[i] / (frames - first) - x[i];
      mean_error += bias * bias;
      energy += double{x[i]} * x[i];
    }
  }
  EXPECT_LT(error[1], 0.8 * error[0]) << error[1] << " vs " << error[0];
  EXPECT_LT(mean_error, 0.03 * error[1] / (frames - first)) << mean_error;
  EXPECT_LT(bytes[1], bytes[0] + (frames - first) * (8 + width / 8 + 16));
  EXPECT_GT(error[1], 0.0001 * energy * (frames - first));  // lossy, as it should be
}

// Dither's symbols are stochastic rounding's with their sign flipped where the noise is below 1/2,
// which the receiver knows: on components of about half a step (rows of 32 independent
// directions, klt:2), the flipped symbols lean one way and take fewer bytes for the same values.
TEST(KltStageTest, DitherSendsSymbolsThatLeanOneWay) {
  const size_t rows = 256, width = 32;
  size_t bytes[2] = {0, 0};
  for (bool dither : {false, true}) {
    auto chain = *CodecChain::Create(dither ? "klt:2:dither" : "klt:2:sr");
    TensorDecoder decoder;
    for (size_t f = 0; f < 40; ++f) {
      const std::vector<float> x = CorrelatedRows(rows, width, width, f);
      auto frame = chain->Encode(x, {rows, width});
      ASSERT_TRUE(frame.ok()) << frame.status();
      DecodedTensor out;
      ASSERT_TRUE(decoder.Decode(*frame, &out).ok());  // and back: the signs restored
      if (f >= 8) bytes[dither] += frame->size();
    }
  }
  EXPECT_LT(bytes[1] * 100, bytes[0] * 96) << bytes[1] << " vs " << bytes[0];
}

// A klt stage's payloads (not whole frames) for `frames` tensors of CorrelatedRows, and a
// receiving stage that decodes them one at a time.
struct StagePayloads {
  StagePayloads(size_t frames, size_t rows, size_t width) : n(rows * width), out(n) {
    const StageSpec spec{.kind = StageKind::kKlt, .step = 0.1};
    auto sender = MakeCodecStage(spec);
    receiver = MakeCodecStage(spec);
    sender->SetRowWidth(width);
    receiver->SetRowWidth(width);
    for (size_t f = 0; f < frames; ++f) {
      std::vector<float> x = CorrelatedRows(rows, width, 2, f);
      ByteBuffer frame;
      EXPECT_TRUE(sender
                      ->Encode({reinterpret_cast<const uint8_t*>(x.data()), 4 * n},
                               {.element_count = n}, &frame)
                      .ok());
      payloads.emplace_back(frame.data(), frame.data() + frame.size());
    }
  }
  absl::Status Decode(const std::vector<uint8_t>& payload) {
    return receiver->Decode(payload, absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), 4 * n));
  }

  size_t n;
  std::vector<float> out;
  std::unique_ptr<CodecStage> receiver;
  std::vector<std::vector<uint8_t>> payloads;
};

// A basis frame whose rank, scales or directions lie: refused, naming what, and the basis the
// receiver held before stays.
TEST(KltStageTest, RefusesAForgedBasis) {
  const size_t width = 8;
  StagePayloads stream(8, 8, width);
  const std::vector<uint8_t>& with_basis = stream.payloads[7];  // 8 rows a column: the first basis
  ASSERT_EQ(with_basis[0], 1);  // a basis follows the 17-byte header: u32 rank first
  const auto forged = [&](size_t at, uint32_t value) {
    std::vector<uint8_t> bad = with_basis;
    std::memcpy(&bad[at], &value, 4);
    return stream.Decode(bad);
  };
  EXPECT_NE(forged(17, 0).message().find("a basis of 0 directions for rows of 8"),
            std::string::npos);
  EXPECT_NE(forged(17, 9).message().find("a basis of 9 directions"), std::string::npos);
  const size_t scales = 17 + 4 + 4 * width;
  EXPECT_NE(forged(scales, 0x7fc00000).message().find("scale"), std::string::npos);  // NaN
  EXPECT_NE(forged(scales + 4 * width, 1u << 30).message().find("basis truncated"),  // its length
            std::string::npos);
  ASSERT_TRUE(stream.Decode(with_basis).ok());
}

// The same rows in sequence and in random order: in sequence, the second basis (frame 160, fitted
// on enough rows for a predictor) carries one and the frames after it cost about 1.2 bits a value
// less (half the log of 1 / (1 - 0.9^2)), at the same error (a closed loop: the noise is the
// step's).
TEST(KltStageTest, CodesOnlyWhatTheRowBeforeDoesNotPredict) {
  const size_t rows = 256, width = 16, frames = 172, first = 161;
  size_t bytes[2] = {0, 0};
  double worst[2] = {0, 0};
  for (bool shuffled : {false, true}) {
    auto chain = *CodecChain::Create("klt:0.1");
    TensorDecoder decoder;
    for (size_t f = 0; f < frames; ++f) {
      std::vector<float> x = SequenceRows(rows, width, 0.9, shuffled, f);
      auto frame = chain->Encode(x, {rows, width});
      ASSERT_TRUE(frame.ok()) << frame.status();
      DecodedTensor out;
      ASSERT_TRUE(decoder.Decode(*frame, &out).ok());
      if (f < first) continue;
      bytes[shuffled] += frame->size();
      double error = 0, energy = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        error += double{out.values[i] - x[i]} * (out.values[i] - x[i]);
        energy += double{x[i]} * x[i];
      }
      worst[shuffled] = std::max(worst[shuffled], std::sqrt(error / energy));
    }
  }
  const double saved_bits = 8.0 * (bytes[1] - bytes[0]) / ((frames - first) * rows * width);
  EXPECT_GT(saved_bits, 0.9) << bytes[0] << " vs " << bytes[1];
  EXPECT_LT(worst[0], 0.035);
  EXPECT_LT(worst[0], 1.1 * worst[1]);
}

// A frame that reuses the rANS tables of the one before, at a receiver that missed that one:
// refused, naming the tables.
TEST(KltStageTest, AReceiverThatMissedTheTablesRefuses) {
  StagePayloads stream(12, 64, 8);
  size_t reusing = 0;  // The first frame that reuses the tables of the one before.
  while (reusing < 12 && !(stream.payloads[reusing][0] & 2)) ++reusing;
  ASSERT_LT(reusing, 12u);
  ASSERT_GE(reusing, 1u);
  for (size_t f = 0; f + 1 < reusing; ++f) ASSERT_TRUE(stream.Decode(stream.payloads[f]).ok()) << f;
  const absl::Status refused = stream.Decode(stream.payloads[reusing]);
  EXPECT_NE(refused.message().find("which this link has not received"), std::string::npos)
      << refused;
  ASSERT_TRUE(stream.Decode(stream.payloads[reusing - 1]).ok());
  EXPECT_TRUE(stream.Decode(stream.payloads[reusing]).ok());
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
  EXPECT_TRUE(moments.Take(2, 10).empty());
  moments.Add(std::vector<float>{1, 2, 3, 4}, 2, 0);  // rows (1, 2) and (3, 4)
  moments.Add(std::vector<float>{0, 2}, 2, 1);
  const std::vector<double> expected = {10.0 / 3, 14.0 / 3, 14.0 / 3, 24.0 / 3};
  const std::vector<double> mean = moments.Take(2, 10);
  ASSERT_EQ(mean.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(mean[i], expected[i], 1e-6) << i;
  EXPECT_TRUE(moments.Take(2, 10).empty());  // forgotten
  moments.Add(std::vector<float>{1, 2, 3}, 3, 2);
  EXPECT_TRUE(moments.Take(2, 10).empty());  // rows of another width
  EXPECT_EQ(moments.Take(3, 10).size(), 9u);
}

// What a Take returns depends on its step, not on how many of the later steps' gradients have
// arrived: the steps before `before`, whatever came after them, and the rest stays for the next.
TEST(GradientMomentsTest, TakesTheStepsBeforeItsOwnWhateverArrivedSince) {
  for (bool later_arrived : {false, true}) {
    GradientMoments moments;
    for (uint64_t step = 0; step < 4; ++step) moments.Add(std::vector<float>{1, 0}, 2, step);
    moments.Add(std::vector<float>{0, 1}, 2, 4);
    if (later_arrived) moments.Add(std::vector<float>{0, 3}, 2, 5);
    const std::vector<double> mean = moments.Take(2, 4);  // The forward of step 5: steps 0-3.
    ASSERT_EQ(mean.size(), 4u);
    EXPECT_EQ(mean[0], 1.0);
    EXPECT_EQ(mean[3], 0.0);
    if (!later_arrived) moments.Add(std::vector<float>{0, 3}, 2, 5);
    const std::vector<double> next = moments.Take(2, 6);  // Steps 4 and 5.
    ASSERT_EQ(next.size(), 4u);
    EXPECT_EQ(next[0], 0.0);
    EXPECT_EQ(next[3], 5.0);
  }
  // A rollback's steps (restarting below the newest): kept for the next Take.
  GradientMoments moments;
  moments.Add(std::vector<float>{1, 0}, 2, 40);
  moments.Add(std::vector<float>{2, 0}, 2, 20);
  EXPECT_EQ(moments.Take(2, 21)[0], 4.0);
  EXPECT_EQ(moments.Take(2, 41)[0], 1.0);
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
  moments->Add(g, width, /*step=*/0);
  auto chain = *CodecChain::Create(chain_text, {.gradients = gradients ? moments : nullptr});
  TensorDecoder decoder;
  double sensitive = 0, rest = 0;
  for (size_t f = 0; f < 24; ++f) {
    std::vector<float> x(rows * width);
    for (float& v : x) v = normal(rng);
    auto frame = chain->Encode(x, {rows, width}, nullptr, "", /*step=*/2);  // Takes step 0's.
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
  EXPECT_LT(plain.sensitive, 0.04);  // the step / sqrt(12) = 0.029, plus the rounded basis
  const SplitError alone = ErrorsWhereTheGradientsAre("klt:0.1:fisher", false);
  EXPECT_EQ(alone.sensitive, plain.sensitive);
  EXPECT_EQ(alone.rest, plain.rest);
}

}  // namespace
}  // namespace strait::compression
