// klt:STEP[:sr|:dither][:fisher] (chain_spec.h): transform coding in a basis the link learns
// (docs/notes/activation-subspace.md §4). The sender keeps the covariance of the rows it codes and
// takes its eigenvectors as the new basis once it holds kFirstFitRows rows per column, then every
// kRefreshFrames frames; a basis travels in the first frame coded in it, and every frame names its
// basis. Coefficients are quantized with one uniform step a frame (STEP x the rms of all width
// coefficients), to nearest or stochastically, and range-coded (rans_coder.h). Rounding to nearest,
// a basis fitted on kSettledRows rows a column keeps only the directions whose variance reaches
// step^2 / 12, the error the others would get: below that water level a coefficient is better not
// sent (reverse water-filling); stochastic rounding keeps them all, to stay unbiased. With `dither`
// the symbols are stochastic rounding's, floor(z + u) for noise u uniform in [0, 1) drawn from a
// seed the frame carries, and the receiver reconstructs z as floor(z + u) + 1/2 - u, whose error is
// uniform and independent of z (subtractive dither: step^2 / 12 where stochastic rounding leaves up
// to step^2 / 6, for the same bytes), in the columns where that is less than stochastic rounding's
// expected error (a column far below the step is left as stochastic rounding gives it: its error
// there is about |z| x step). The receiver knows the noise, so dither's symbols are sent with
// their sign flipped where u < 1/2: for a component symmetric about 0, floor(z + u) leans to -1
// when u < 1/2 and to +1 otherwise, so the flipped symbols lean one way and cost fewer bits (what
// the noise's half tells about the symbol: 4% of the GPT's gradients' bytes). Where a row follows
// from the one before (the residual stream of consecutive tokens), the basis carries a predictor
// (klt_basis.h) and the sender codes each row's coefficients less their prediction from the row
// before as the receiver reconstructs it (a closed loop: the noise is the step's as without it, the
// symbols smaller). The two ends' predictions agree to a float's rounding where their BLAS differ,
// and the loop does not amplify that (the predictor's ridge is the noise). With `fisher` the basis
// is fitted to the gradients that came back over the link too, those of the steps at least two
// before the frame's since the last fit (gradient_moments.h, klt_basis.h); the receiver decodes it
// like any other.
//
// Unlike every other stage, a klt frame does not decode alone: the receiver holds the basis an
// earlier frame of its link carried. Frames of one link direction are decoded in the order they
// were sent (site::FrameReceiver), and both ends start a rollback generation with new links, so
// without a basis (the identity, uncentred, until the sender's first fit).
//
// Payload (little-endian): u8 flags (bit 0: a basis follows; bit 1: the symbols reuse the rANS
// tables of the link's frame before), u32 basis id (0: the identity), u32 row width d, f32 step,
// u32 the number of the tables the symbols use (counted from 1 on each link direction); [dither:
// u64 the noise's seed, ceil(d / 8) bytes: bit k set if the receiver subtracts column k's noise];
// [a basis: u32 rank k, d f32 mean, k f32 scales, u32 L, L bytes: the k x d directions in whole
// multiples of their row's scale, range-coded; u8 1 if a predictor follows: k f32 scales, u32 L, L
// bytes: its k x k values, the same way]; the symbols (rows of k; with dither, signs flipped
// where the noise is below 1/2).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/codec_stage.h"
#include "compression/float_bits.h"
#include "compression/klt_basis.h"
#include "compression/klt_math.h"
#include "compression/rans_coder.h"

namespace strait::compression {
namespace {

constexpr uint64_t kRefreshFrames = 160;  // 20 steps of 8 microbatches
// The first basis: once the covariance has this many rows per column (4 of the GPT's frames of
// [512, 256]), so that a link leaves the identity within its first step.
constexpr uint64_t kFirstFitRows = 8;
// Enough rows a column for the small eigenvalues (Marchenko-Pastur: at 8 a column the smallest
// come out at about half their size) and for a predictor's d^2 values: the first basis keeps every
// direction and predicts nothing.
constexpr uint64_t kSettledRows = 64;
constexpr uint64_t kHeaderSize = 17;
constexpr uint64_t kTablesAt = 13;  // The header's last field: the tables' number.
constexpr uint8_t kFlagBasis = 1, kFlagReusedTables = 2;
// Far beyond any activation or gradient; keeps every honest frame's reconstruction finite.
constexpr float kMaxValue = 1e30f;

// A basis's bytes, at most (a rank of width, and a predictor).
uint64_t MaxBasisSize(uint64_t width) {
  return 4 + 8 * width + 4 + MaxCodedSize(width * width, width) + 1 + 4 * width + 4 +
         MaxCodedSize(width * width, width);
}

class KltStage final : public CodecStage {
 public:
  KltStage(const StageSpec& spec, const KltMathFactory& math)
      : step_(spec.step),
        stochastic_(spec.stochastic),
        dithered_(spec.dithered),
        fisher_(spec.fisher),
        send_math_(math ? math() : MakeHostKltMath()),
        receive_math_(math ? math() : MakeHostKltMath()) {}

  void SetRowWidth(uint64_t row_width) override { row_width_ = row_width; }

  absl::Status Encode(absl::Span<const uint8_t> in, const EncodeContext& context,
                      ByteBuffer* out) override {
    const uint64_t n = context.element_count, d = row_width_;
    STRAIT_RETURN_IF_ERROR(CheckWidth(n));
    const float* x = reinterpret_cast<const float*>(in.data());
    const size_t rows = n / d;
    for (size_t i = 0; i < n; ++i) {  // Before any state changes; NaN fails the comparison.
      if (!(std::abs(x[i]) <= kMaxValue)) {
        return absl::InvalidArgumentError(
            "klt codes finite values up to 1e30 in magnitude; the tensor holds NaN, an infinity "
            "or a larger value");
      }
    }
    if (tracker_.width() != d) {  // A new link, or rows of another width: start over.
      tracker_.Reset(d);
      sent_ = KltBasis{.width = d, .rank = d};
      frames_ = 0;
    }
    STRAIT_RETURN_IF_ERROR(send_math_->LoadRows(x, rows, d));
    STRAIT_RETURN_IF_ERROR(tracker_.Add(x, rows, *send_math_));
    bool carries_basis = false;
    ++frames_;
    const bool first_fit = sent_.id == 0 && tracker_.rows() >= kFirstFitRows * d;
    if (first_fit || frames_ == kRefreshFrames) {
      std::vector<double> sensitivity;
      if (fisher_ && context.gradients != nullptr) {  // Those every schedule has received.
        sensitivity = context.gradients->Take(d, context.step == 0 ? 0 : context.step - 1);
      }
      const bool settled = tracker_.rows() >= kSettledRows * d;
      const FitOptions options{.sensitivity = sensitivity,
                               .floor = settled && !stochastic_ ? step_ * step_ / 12 : 0.0,
                               .noise = step_ * step_ / (stochastic_ && !dithered_ ? 6 : 12),
                               .predicted_rows = settled ? kRefreshFrames * rows : 0};
      STRAIT_ASSIGN_OR_RETURN(sent_, tracker_.Fit(sent_.id + 1, options));
      STRAIT_RETURN_IF_ERROR(send_math_->SetBasis(sent_));
      frames_ = 0;
      carries_basis = true;
    }
    coefficients_.resize(rows * sent_.rank);
    if (sent_.id == 0) {
      std::copy_n(x, n, coefficients_.data());
    } else {
      STRAIT_RETURN_IF_ERROR(send_math_->Forward(coefficients_.data()));
    }
    double squares = 0;  // Finite: every value is at most 1e30.
    for (float z : coefficients_) squares += double{z} * z;
    const float step = n == 0 ? 0.0f : static_cast<float>(step_ * std::sqrt(squares / n));
    Quantize(step, context.seed, rows);

    const size_t at = out->size();
    out->Resize(at + HeaderSize(d));
    uint8_t* p = out->data() + at;
    p[0] = carries_basis ? kFlagBasis : 0;
    const uint32_t id = sent_.id, width = static_cast<uint32_t>(d);
    std::memcpy(p + 1, &id, 4);
    std::memcpy(p + 5, &width, 4);
    std::memcpy(p + 9, &step, 4);
    if (carries_basis) WriteBasis(out);
    const bool reused = coder_.Encode(symbols_, sent_.rank, out, out->size(), /*may_reuse=*/true);
    if (reused) {
      out->data()[at] |= kFlagReusedTables;
    } else {
      ++tables_sent_;
    }
    std::memcpy(out->data() + at + kTablesAt, &tables_sent_, 4);
    if (dithered_) {
      std::memcpy(out->data() + at + kHeaderSize, &context.seed, 8);
      std::memcpy(out->data() + at + kHeaderSize + 8, subtracted_.data(), subtracted_.size());
    }
    return absl::OkStatus();
  }

  absl::Status CheckSizes(uint64_t decoded_size, uint64_t encoded_size) const override {
    if (decoded_size % 4 != 0) return Malformed("a size that is not whole floats");
    STRAIT_RETURN_IF_ERROR(CheckWidth(decoded_size / 4));
    const uint64_t d = row_width_;
    const uint64_t most = HeaderSize(d) + MaxBasisSize(d) + MaxCodedSize(decoded_size / 4, d);
    if (encoded_size < HeaderSize(d) || encoded_size > most) {
      return absl::InvalidArgumentError(absl::StrCat(
          "malformed codec frame: klt stage of ", encoded_size, " bytes for ", decoded_size / 4,
          " values (at least ", HeaderSize(d), ", at most ", most, ")"));
    }
    return absl::OkStatus();
  }

  absl::Status Decode(absl::Span<const uint8_t> in, absl::Span<uint8_t> out) override {
    const uint64_t n = out.size() / 4, d = row_width_;
    STRAIT_RETURN_IF_ERROR(CheckSizes(out.size(), in.size()));
    uint32_t id, width;
    float step;
    std::memcpy(&id, in.data() + 1, 4);
    std::memcpy(&width, in.data() + 5, 4);
    std::memcpy(&step, in.data() + 9, 4);
    uint32_t tables;
    std::memcpy(&tables, in.data() + kTablesAt, 4);
    if (in[0] & ~(kFlagBasis | kFlagReusedTables)) return Malformed("unknown flags");
    const bool reused = in[0] & kFlagReusedTables;
    if (reused && tables != tables_received_) {
      return Malformed(absl::StrCat("coded with tables ", tables,
                                    ", which this link has not received (it holds ",
                                    tables_received_, "): frames lost or out of order"));
    }
    if (width != d) {
      return Malformed(absl::StrCat("rows of ", width, " values where the tensor's have ", d));
    }
    if (!std::isfinite(step) || step < 0) return Malformed("step is not a finite value >= 0");
    uint64_t seed = 0;
    if (dithered_) {
      std::memcpy(&seed, in.data() + kHeaderSize, 8);
      subtracted_.assign(in.begin() + kHeaderSize + 8, in.begin() + HeaderSize(d));
    }
    size_t pos = HeaderSize(d);
    if (in[0] & kFlagBasis) {
      if (id == 0) return Malformed("a basis with id 0 (the identity's)");
      STRAIT_ASSIGN_OR_RETURN(const size_t basis_size, ReadBasis(in.subspan(pos), id, d));
      STRAIT_RETURN_IF_ERROR(receive_math_->SetBasis(received_));
      pos += basis_size;
    } else if (id != 0 && (id != received_.id || received_.width != d)) {
      return Malformed(absl::StrCat("coded in basis ", id, ", which this link has not received",
                                    received_.id == 0 ? "" : " (it holds basis ",
                                    received_.id == 0 ? "" : absl::StrCat(received_.id, ")"),
                                    ": frames lost or out of order"));
    }
    const size_t rank = id == 0 ? d : received_.rank;
    for (size_t k = rank; dithered_ && k < d; ++k) {
      if (Subtracted(k)) return Malformed("noise subtracted in a column beyond the basis's rank");
    }
    symbols_.resize(n / d * rank);
    STRAIT_RETURN_IF_ERROR(coder_.Decode(in.subspan(pos), rank, absl::MakeSpan(symbols_), reused));
    if (!reused) tables_received_ = tables;
    coefficients_.resize(symbols_.size());
    if (dithered_) {
      RestoreDithered(step, seed, rank);
    } else {
      for (size_t i = 0; i < symbols_.size(); ++i) {
        coefficients_[i] = static_cast<float>(symbols_[i]) * step;
      }
    }
    if (id != 0 && !received_.predictor.empty()) {  // Quantize's reconstruction, row by row.
      prediction_.resize(rank);
      for (size_t r = 1; r < n / d; ++r) {
        received_.Predict(&coefficients_[(r - 1) * rank], prediction_.data());
        float* row = &coefficients_[r * rank];
        for (size_t k = 0; k < rank; ++k) row[k] = prediction_[k] + row[k];
      }
    }
    float* x = reinterpret_cast<float*>(out.data());
    if (n == 0) return absl::OkStatus();
    if (id == 0) {
      std::memcpy(x, coefficients_.data(), 4 * n);
    } else {
      STRAIT_RETURN_IF_ERROR(receive_math_->Inverse(coefficients_.data(), n / d, x));
    }
    // A sender codes only finite values (Encode refuses others): an overflow here is forged.
    for (size_t i = 0; i < n; ++i) {
      if (!std::isfinite(x[i])) return Malformed("the values overflow a float");
    }
    return absl::OkStatus();
  }

 private:
  static absl::Status Malformed(absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("malformed codec frame: klt: ", what));
  }

  // Rows of 1 to kMaxKltWidth values, whole.
  absl::Status CheckWidth(uint64_t n) const {
    if (row_width_ == 0 || row_width_ > kMaxKltWidth) {
      return absl::InvalidArgumentError(absl::StrCat("klt codes rows of 1 to ", kMaxKltWidth,
                                                     " values (the tensor's last "
                                                     "dimension); these have ",
                                                     row_width_));
    }
    if (n % row_width_ != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("klt: ", n, " values are not whole rows of ", row_width_));
    }
    return absl::OkStatus();
  }

  // The header's size, with dither's seed and columns for rows of `width`.
  uint64_t HeaderSize(uint64_t width) const {
    return kHeaderSize + (dithered_ ? 8 + (width + 7) / 8 : 0);
  }

  bool Subtracted(size_t column) const { return subtracted_[column / 8] >> (column % 8) & 1; }

  // The coefficient `symbol` stands for, its rounding noise `noise` subtracted in a `subtracted`
  // column (dither), as both ends reconstruct it.
  static float Reconstruct(int32_t symbol, float noise, bool subtracted, float step) {
    return (static_cast<float>(symbol) + (subtracted ? 0.5f - noise : 0.0f)) * step;
  }

  // Decode's dithered symbols (rows of `rank`): each one's sign restored (Quantize flips it where
  // its noise is below 1/2) and its coefficient reconstructed, one noise value a symbol.
  void RestoreDithered(float step, uint64_t seed, size_t rank) {
    for (size_t k = 0; k < rank; ++k) {
      const bool subtracted = Subtracted(k);
      for (size_t i = k; i < symbols_.size(); i += rank) {
        const float noise = RoundingNoise(seed, i);
        if (noise < 0.5f) symbols_[i] = -symbols_[i];
        coefficients_[i] = Reconstruct(symbols_[i], noise, subtracted, step);
      }
    }
  }

  // With dither: subtracted_ marks the columns whose expected error with the noise subtracted
  // (1/12 of step^2 a value) is below stochastic rounding's (f (1 - f) for the fraction f of
  // z / step). It depends on the values only, not on the noise, so both stay unbiased.
  void ChooseSubtractedColumns(float inverse, size_t rows) {
    const size_t rank = sent_.rank;
    column_error_.assign(rank, 0.0);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t k = 0; k < rank; ++k) {
        const float z = coefficients_[r * rank + k] * inverse;
        const double f = z - std::floor(z);
        column_error_[k] += f * (1 - f);
      }
    }
    for (size_t k = 0; k < rank; ++k) {
      if (column_error_[k] > rows / 12.0) subtracted_[k / 8] |= uint8_t{1} << (k % 8);
    }
  }

  // symbols_ = coefficients_ / step, rounded (to nearest, or stochastically from `seed`); with a
  // predictor, each row's coefficients less their prediction from the row before as Decode will
  // reconstruct it. With dither, symbols_ holds each symbol with its sign flipped where its noise
  // is below 1/2 (what travels).
  void Quantize(float step, uint64_t seed, size_t rows) {
    symbols_.resize(coefficients_.size());
    const float inverse = 1.0f / step;
    subtracted_.assign(dithered_ ? (row_width_ + 7) / 8 : 0, 0);
    if (step == 0 || !std::isfinite(inverse)) {  // Nothing, or values too small for a float step.
      std::fill(symbols_.begin(), symbols_.end(), 0);
      return;
    }
    if (dithered_) ChooseSubtractedColumns(inverse, rows);
    const double limit = kMaxCodedSymbol;  // exact in a double, not in a float
    // Rounds `scaled` (value i) into symbols_[i] as it travels; returns the symbol unflipped and
    // its rounding noise in *noise.
    const auto code = [&](float scaled, size_t i, float* noise) {
      *noise = stochastic_ ? RoundingNoise(seed, i) : 0.0f;
      const float rounded = stochastic_ ? std::floor(scaled + *noise) : std::nearbyint(scaled);
      const auto symbol = static_cast<int32_t>(std::clamp(double{rounded}, -limit, limit));
      symbols_[i] = dithered_ && *noise < 0.5f ? -symbol : symbol;
      return symbol;
    };
    float noise = 0;
    if (sent_.predictor.empty()) {
      for (size_t i = 0; i < coefficients_.size(); ++i) code(coefficients_[i] * inverse, i, &noise);
      return;
    }
    const size_t rank = sent_.rank;
    previous_.assign(rank, 0.0f);
    prediction_.assign(rank, 0.0f);
    for (size_t r = 0; r < rows; ++r) {
      if (r > 0) sent_.Predict(previous_.data(), prediction_.data());
      for (size_t k = 0; k < rank; ++k) {
        const size_t i = r * rank + k;
        const int32_t symbol = code((coefficients_[i] - prediction_[k]) * inverse, i, &noise);
        previous_[k] =
            prediction_[k] + Reconstruct(symbol, noise, dithered_ && Subtracted(k), step);
      }
    }
  }

  // Appends `values` (rows of `width`, whole multiples of their row's scale) as: the scales, u32 L,
  // L bytes of the range-coded multiples.
  void WriteRows(const std::vector<float>& values, const std::vector<float>& scales, size_t width,
                 ByteBuffer* out) {
    const size_t rows = scales.size(), at = out->size();
    out->Resize(at + 4 * rows + 4);
    std::memcpy(out->data() + at, scales.data(), 4 * rows);
    levels_.resize(rows * width);
    for (size_t r = 0; r < rows; ++r) {  // Exact: each value is a whole multiple of its scale.
      for (size_t i = 0; i < width; ++i) {
        levels_[r * width + i] =
            scales[r] > 0 ? static_cast<int32_t>(std::lround(values[r * width + i] / scales[r]))
                          : 0;
      }
    }
    basis_coder_.Encode(levels_, width, out, out->size());
    const uint32_t length = static_cast<uint32_t>(out->size() - at - 4 * rows - 4);
    std::memcpy(out->data() + at + 4 * rows, &length, 4);
  }

  // Reads what WriteRows wrote at the start of `in`: `rows` rows of `width`. Returns its size.
  absl::StatusOr<size_t> ReadRows(absl::Span<const uint8_t> in, size_t rows, size_t width,
                                  int32_t levels, std::vector<float>* values,
                                  std::vector<float>* scales) {
    if (in.size() < 4 * rows + 4) return Malformed("basis truncated");
    scales->resize(rows);
    std::memcpy(scales->data(), in.data(), 4 * rows);
    for (float v : *scales) {
      if (!std::isfinite(v) || v < 0)
        return Malformed("a direction's scale is not finite and >= 0");
    }
    uint32_t length;
    std::memcpy(&length, in.data() + 4 * rows, 4);
    const size_t fixed = 4 * rows + 4;
    if (in.size() - fixed < length) return Malformed("basis truncated");
    levels_.resize(rows * width);
    STRAIT_RETURN_IF_ERROR(
        basis_coder_.Decode(in.subspan(fixed, length), width, absl::MakeSpan(levels_)));
    values->resize(rows * width);
    for (size_t r = 0; r < rows; ++r) {
      for (size_t i = 0; i < width; ++i) {
        const int32_t level = levels_[r * width + i];
        if (level < -levels || level > levels) {
          return Malformed("a basis value beyond its scale's range");
        }
        (*values)[r * width + i] = static_cast<float>(level) * (*scales)[r];
      }
    }
    for (float v : *values) {
      if (!std::isfinite(v)) return Malformed("the basis is not finite");
    }
    return fixed + length;
  }

  // Appends sent_ as the payload's basis.
  void WriteBasis(ByteBuffer* out) {
    const uint64_t d = sent_.width, k = sent_.rank;
    const size_t at = out->size();
    out->Resize(at + 4 + 4 * d);
    const uint32_t rank = static_cast<uint32_t>(k);
    std::memcpy(out->data() + at, &rank, 4);
    std::memcpy(out->data() + at + 4, sent_.mean.data(), 4 * d);
    WriteRows(sent_.directions, sent_.scales, d, out);
    const uint8_t predicts = sent_.predictor.empty() ? 0 : 1;
    out->Resize(out->size() + 1);
    out->data()[out->size() - 1] = predicts;
    if (predicts) WriteRows(sent_.predictor, sent_.predictor_scales, k, out);
  }

  // Reads the basis at the start of `in` into received_ (unchanged on error); returns its size.
  absl::StatusOr<size_t> ReadBasis(absl::Span<const uint8_t> in, uint32_t id, uint64_t d) {
    uint32_t rank = 0;
    if (in.size() < 4) return Malformed("basis truncated");
    std::memcpy(&rank, in.data(), 4);
    if (rank == 0 || rank > d) {
      return Malformed(absl::StrCat("a basis of ", rank, " directions for rows of ", d));
    }
    const uint64_t k = rank;
    if (in.size() < 4 + 4 * d) return Malformed("basis truncated");
    KltBasis basis{.id = id, .width = d, .rank = k};
    basis.mean.resize(d);
    std::memcpy(basis.mean.data(), in.data() + 4, 4 * d);
    for (float v : basis.mean) {
      if (!std::isfinite(v)) return Malformed("the basis's mean is not finite");
    }
    size_t pos = 4 + 4 * d;
    STRAIT_ASSIGN_OR_RETURN(size_t size, ReadRows(in.subspan(pos), k, d, kDirectionLevels,
                                                  &basis.directions, &basis.scales));
    pos += size;
    if (pos == in.size()) return Malformed("basis truncated");
    const uint8_t predicts = in[pos++];
    if (predicts > 1) return Malformed("a predictor flag other than 0 or 1");
    if (predicts) {
      STRAIT_ASSIGN_OR_RETURN(size, ReadRows(in.subspan(pos), k, k, kPredictorLevels,
                                             &basis.predictor, &basis.predictor_scales));
      pos += size;
    }
    received_ = std::move(basis);
    return pos;
  }

  const double step_;
  const bool stochastic_;
  // Stochastic, and the receiver subtracts the noise (in subtracted_'s columns).
  const bool dithered_;
  const bool fisher_;  // Shapes the basis by context.gradients (the link's), when there are some.
  // The transforms of each side (the host's BLAS, or a GPU's: CodecOptions::klt_math).
  const std::unique_ptr<KltMath> send_math_, receive_math_;
  uint64_t row_width_ = 0;
  // The sender's side.
  CovarianceTracker tracker_;
  KltBasis sent_;
  uint64_t frames_ = 0;       // Since the last fit.
  uint32_t tables_sent_ = 0;  // rANS tables sent (the coder reuses the last when they fit).
  // The receiver's side.
  KltBasis received_;
  uint32_t tables_received_ = 0;  // The number of the last tables decoded.
  // Scratch.
  std::vector<float> coefficients_;
  std::vector<float> previous_, prediction_;  // A row's, with a predictor.
  std::vector<int32_t> symbols_, levels_;
  std::vector<uint8_t> subtracted_;   // With dither: the frame's columns (a bit each).
  std::vector<double> column_error_;  // Stochastic rounding's, a column.
  RansCoder coder_, basis_coder_;
};

}  // namespace

std::unique_ptr<CodecStage> MakeKltStage(const StageSpec& spec, const KltMathFactory& math) {
  return std::make_unique<KltStage>(spec, math);
}

}  // namespace strait::compression
