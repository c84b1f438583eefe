// klt:STEP[:sr][:fisher] (chain_spec.h): transform coding in a basis the link learns
// (docs/notes/activation-subspace.md §4). The sender keeps the covariance of the rows it codes and
// takes its eigenvectors as the new basis once it holds kFirstFitRows rows per column, then every
// kRefreshFrames frames; a basis travels (bf16) in the first frame coded in it, and every frame
// names its basis. Coefficients are quantized with one uniform step a frame (STEP x their rms), to
// nearest or stochastically, and range-coded (rans_coder.h). With `fisher` the basis is fitted
// to the gradients that came back over the link since the last fit too (klt_basis.h); the
// receiver decodes it like any other.
//
// Unlike every other stage, a klt frame does not decode alone: the receiver holds the basis an
// earlier frame of its link carried. Frames of one link direction are decoded in the order they
// were sent (site::FrameReceiver), and both ends start a rollback generation with new links, so
// without a basis (the identity, uncentred, until the sender's first fit).
//
// Payload (little-endian): u8 flags (bit 0: a basis follows), u32 basis id (0: the identity),
// u32 row width d, f32 step; [a basis: d f32 mean, d x d bf16 directions]; the symbols.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/codec_stage.h"
#include "compression/float_bits.h"
#include "compression/klt_basis.h"
#include "compression/rans_coder.h"

namespace strait::compression {
namespace {

constexpr uint64_t kRefreshFrames = 160;  // 20 steps of 8 microbatches
// The first basis: once the covariance has this many rows per column (4 of the GPT's frames of
// [512, 256]), so that a link leaves the identity within its first step.
constexpr uint64_t kFirstFitRows = 8;
constexpr uint64_t kHeaderSize = 13;
constexpr uint8_t kFlagBasis = 1;
// Far beyond any activation or gradient; keeps every honest frame's reconstruction finite.
constexpr float kMaxValue = 1e30f;

uint64_t BasisSize(uint64_t width) { return 4 * width + 2 * width * width; }

class KltStage final : public CodecStage {
 public:
  explicit KltStage(const StageSpec& spec)
      : step_(spec.step), stochastic_(spec.stochastic), fisher_(spec.fisher) {}

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
      sent_ = KltBasis{.width = d};
      frames_ = 0;
    }
    tracker_.Add(x, rows);
    bool carries_basis = false;
    ++frames_;
    const bool first_fit = sent_.id == 0 && tracker_.rows() >= kFirstFitRows * d;
    if (first_fit || frames_ == kRefreshFrames) {
      std::vector<double> sensitivity;
      if (fisher_ && context.gradients != nullptr) sensitivity = context.gradients->Take(d);
      STRAIT_ASSIGN_OR_RETURN(sent_, tracker_.Fit(sent_.id + 1, sensitivity));
      frames_ = 0;
      carries_basis = true;
    }
    coefficients_.resize(n);
    sent_.Forward(x, rows, coefficients_.data());
    double squares = 0;  // Finite: every value is at most 1e30.
    for (float z : coefficients_) squares += double{z} * z;
    const float step = n == 0 ? 0.0f : static_cast<float>(step_ * std::sqrt(squares / n));
    Quantize(step, context.seed);

    const size_t at = out->size();
    out->Resize(at + kHeaderSize + (carries_basis ? BasisSize(d) : 0));
    uint8_t* p = out->data() + at;
    p[0] = carries_basis ? kFlagBasis : 0;
    const uint32_t id = sent_.id, width = static_cast<uint32_t>(d);
    std::memcpy(p + 1, &id, 4);
    std::memcpy(p + 5, &width, 4);
    std::memcpy(p + 9, &step, 4);
    if (carries_basis) {
      std::memcpy(p + kHeaderSize, sent_.mean.data(), 4 * d);
      uint8_t* directions = p + kHeaderSize + 4 * d;
      for (size_t i = 0; i < d * d; ++i) {
        const uint16_t bits = FloatToBf16Bits(sent_.directions[i]);
        std::memcpy(directions + 2 * i, &bits, 2);
      }
    }
    coder_.Encode(symbols_, d, out, out->size());
    return absl::OkStatus();
  }

  absl::Status CheckSizes(uint64_t decoded_size, uint64_t encoded_size) const override {
    if (decoded_size % 4 != 0) return Malformed("a size that is not whole floats");
    STRAIT_RETURN_IF_ERROR(CheckWidth(decoded_size / 4));
    const uint64_t d = row_width_;
    const uint64_t most = kHeaderSize + BasisSize(d) + MaxCodedSize(decoded_size / 4, d);
    if (encoded_size < kHeaderSize || encoded_size > most) {
      return absl::InvalidArgumentError(absl::StrCat(
          "malformed codec frame: klt stage of ", encoded_size, " bytes for ", decoded_size / 4,
          " values (at least ", kHeaderSize, ", at most ", most, ")"));
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
    if (in[0] & ~kFlagBasis) return Malformed("unknown flags");
    if (width != d) {
      return Malformed(absl::StrCat("rows of ", width, " values where the tensor's have ", d));
    }
    if (!std::isfinite(step) || step < 0) return Malformed("step is not a finite value >= 0");
    size_t pos = kHeaderSize;
    if (in[0] & kFlagBasis) {
      if (id == 0) return Malformed("a basis with id 0 (the identity's)");
      if (in.size() - pos < BasisSize(d)) return Malformed("basis truncated");
      STRAIT_RETURN_IF_ERROR(ReadBasis(in.subspan(pos, BasisSize(d)), id, d));
      pos += BasisSize(d);
    } else if (id != 0 && (id != received_.id || received_.width != d)) {
      return Malformed(absl::StrCat("coded in basis ", id, ", which this link has not received",
                                    received_.id == 0 ? "" : " (it holds basis ",
                                    received_.id == 0 ? "" : absl::StrCat(received_.id, ")"),
                                    ": frames lost or out of order"));
    }
    symbols_.resize(n);
    STRAIT_RETURN_IF_ERROR(coder_.Decode(in.subspan(pos), d, absl::MakeSpan(symbols_)));
    coefficients_.resize(n);
    for (size_t i = 0; i < n; ++i) coefficients_[i] = static_cast<float>(symbols_[i]) * step;
    float* x = reinterpret_cast<float*>(out.data());
    if (n == 0) return absl::OkStatus();
    if (id == 0) {
      std::memcpy(x, coefficients_.data(), 4 * n);
    } else {
      received_.Inverse(coefficients_.data(), n / d, x);
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

  // symbols_ = coefficients_ / step, rounded (to nearest, or stochastically from `seed`).
  void Quantize(float step, uint64_t seed) {
    symbols_.resize(coefficients_.size());
    const float inverse = 1.0f / step;
    if (step == 0 || !std::isfinite(inverse)) {  // Nothing, or values too small for a float step.
      std::fill(symbols_.begin(), symbols_.end(), 0);
      return;
    }
    const double limit = kMaxCodedSymbol;  // exact in a double, not in a float
    for (size_t i = 0; i < coefficients_.size(); ++i) {
      const float scaled = coefficients_[i] * inverse;
      const float rounded =
          stochastic_ ? std::floor(scaled + RoundingNoise(seed, i)) : std::nearbyint(scaled);
      symbols_[i] = static_cast<int32_t>(std::clamp(double{rounded}, -limit, limit));
    }
  }

  absl::Status ReadBasis(absl::Span<const uint8_t> bytes, uint32_t id, uint64_t d) {
    received_.id = id;
    received_.width = d;
    received_.mean.resize(d);
    std::memcpy(received_.mean.data(), bytes.data(), 4 * d);
    received_.directions.resize(d * d);
    const uint8_t* directions = bytes.data() + 4 * d;
    for (size_t i = 0; i < d * d; ++i) {
      uint16_t bits;
      std::memcpy(&bits, directions + 2 * i, 2);
      received_.directions[i] = Bf16BitsToFloat(bits);
    }
    for (float v : received_.mean) {
      if (!std::isfinite(v)) return Malformed("the basis's mean is not finite");
    }
    for (float v : received_.directions) {
      if (!std::isfinite(v)) return Malformed("the basis is not finite");
    }
    return absl::OkStatus();
  }

  const double step_;
  const bool stochastic_;
  const bool fisher_;  // Shapes the basis by context.gradients (the link's), when there are some.
  uint64_t row_width_ = 0;
  // The sender's side.
  CovarianceTracker tracker_;
  KltBasis sent_;
  uint64_t frames_ = 0;  // Since the last fit.
  // The receiver's side.
  KltBasis received_;
  // Scratch.
  std::vector<float> coefficients_;
  std::vector<int32_t> symbols_;
  RansCoder coder_;
};

}  // namespace

std::unique_ptr<CodecStage> MakeKltStage(const StageSpec& spec) {
  return std::make_unique<KltStage>(spec);
}

}  // namespace strait::compression
