// int8 and int4 quantization with per-block absmax scales, round to nearest even or stochastic.
#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compression/float_bits.h"
#include "compression/quantize_stage.h"
#include "compression/stage.h"

namespace strait::compression {
namespace {

int32_t BlockAbsMax(const float* __restrict x, size_t m) {
  int32_t amax = 0;
  for (size_t i = 0; i < m; ++i) amax = std::max(amax, FiniteAbsBits(x[i]));
  return amax;
}

template <bool kStochastic>
void QuantizeInt8Block(const float* __restrict x, size_t m, const QuantScale& s, uint64_t seed,
                       uint64_t first, int8_t* __restrict codes) {
  for (size_t i = 0; i < m; ++i) {
    float noise = kStochastic ? RoundingNoise(seed, first + i) : 0.0f;
    codes[i] = static_cast<int8_t>(QuantizeValue(x[i], s, 127, kStochastic, noise, -128));
  }
}

template <bool kStochastic>
void QuantizeInt4Block(const float* __restrict x, size_t m, const QuantScale& s, uint64_t seed,
                       uint64_t first, uint8_t* __restrict codes) {
  const size_t pairs = m / 2;
  for (size_t i = 0; i < pairs; ++i) {
    float n0 = kStochastic ? RoundingNoise(seed, first + 2 * i) : 0.0f;
    float n1 = kStochastic ? RoundingNoise(seed, first + 2 * i + 1) : 0.0f;
    int32_t lo = QuantizeValue(x[2 * i], s, 7, kStochastic, n0, -8);
    int32_t hi = QuantizeValue(x[2 * i + 1], s, 7, kStochastic, n1, -8);
    codes[i] = static_cast<uint8_t>((lo & 0xf) | ((hi & 0xf) << 4));
  }
  if (m % 2 != 0) {  // only the tensor's last block can be odd; the high nibble is padding (0)
    float n0 = kStochastic ? RoundingNoise(seed, first + m - 1) : 0.0f;
    codes[pairs] = static_cast<uint8_t>(QuantizeValue(x[m - 1], s, 7, kStochastic, n0, -8) & 0xf);
  }
}

float CodeToFloat(int32_t code, int32_t nan_code, float scale) {
  return code == nan_code ? BitsFloat(0x7fc00000u) : static_cast<float>(code) * scale;
}

class QuantizeStage final : public Stage {
 public:
  explicit QuantizeStage(const StageSpec& spec)
      : bits_(spec.kind == StageKind::kInt8 ? 8 : 4),
        block_(spec.block_size),
        stochastic_(spec.stochastic) {}

  absl::Status Encode(absl::Span<const uint8_t> in, const EncodeContext& context,
                      ByteBuffer* out) override {
    const uint64_t n = context.element_count;
    const uint64_t blocks = BlockCount(n, block_);
    size_t base = out->size();
    out->Resize(base + QuantizedSize(bits_, n, block_));
    uint8_t* scales = out->data() + base;
    uint8_t* codes = scales + 4 * blocks;
    const float* x = reinterpret_cast<const float*>(in.data());
    const float qmax = bits_ == 8 ? 127.0f : 7.0f;
    for (uint64_t b = 0; b < blocks; ++b) {
      const uint64_t first = b * block_;
      const size_t m = static_cast<size_t>(std::min<uint64_t>(block_, n - first));
      QuantScale s = MakeQuantScale(BlockAbsMax(x + first, m), qmax);
      std::memcpy(scales + 4 * b, &s.scale, 4);
      if (bits_ == 8) {
        int8_t* c = reinterpret_cast<int8_t*>(codes + first);
        stochastic_ ? QuantizeInt8Block<true>(x + first, m, s, context.seed, first, c)
                    : QuantizeInt8Block<false>(x + first, m, s, context.seed, first, c);
      } else {
        uint8_t* c = codes + first / 2;  // block sizes are even: every block starts on a byte
        stochastic_ ? QuantizeInt4Block<true>(x + first, m, s, context.seed, first, c)
                    : QuantizeInt4Block<false>(x + first, m, s, context.seed, first, c);
      }
    }
    return absl::OkStatus();
  }

  absl::Status CheckSizes(uint64_t decoded_size, uint64_t encoded_size) const override {
    uint64_t expected = QuantizedSize(bits_, decoded_size / 4, block_);
    if (expected != encoded_size) return SizeError(Name(), expected, encoded_size);
    return absl::OkStatus();
  }

  absl::Status Decode(absl::Span<const uint8_t> in, absl::Span<uint8_t> out) override {
    STRAIT_RETURN_IF_ERROR(CheckSizes(out.size(), in.size()));
    const uint64_t n = out.size() / 4;
    const uint64_t blocks = BlockCount(n, block_);
    const uint8_t* codes = in.data() + 4 * blocks;
    float* y = reinterpret_cast<float*>(out.data());
    for (uint64_t b = 0; b < blocks; ++b) {
      float scale;
      std::memcpy(&scale, in.data() + 4 * b, 4);
      if (!(scale >= 0.0f && scale <= std::numeric_limits<float>::max())) {
        return absl::InvalidArgumentError(
            absl::StrCat("codec stage '", Name(), "': block ", b, " has an invalid scale"));
      }
      const uint64_t first = b * block_;
      const size_t m = static_cast<size_t>(std::min<uint64_t>(block_, n - first));
      if (bits_ == 8) {
        DecodeInt8Block(reinterpret_cast<const int8_t*>(codes + first), m, scale, y + first);
      } else {
        DecodeInt4Block(codes + first / 2, m, scale, y + first);
      }
    }
    return absl::OkStatus();
  }

 private:
  static void DecodeInt8Block(const int8_t* __restrict c, size_t m, float scale,
                              float* __restrict y) {
    for (size_t i = 0; i < m; ++i) y[i] = CodeToFloat(c[i], -128, scale);
  }

  static void DecodeInt4Block(const uint8_t* __restrict c, size_t m, float scale,
                              float* __restrict y) {
    for (size_t i = 0; i < m / 2; ++i) {
      int32_t lo = static_cast<int8_t>(c[i] << 4) >> 4;
      int32_t hi = static_cast<int8_t>(c[i]) >> 4;
      y[2 * i] = CodeToFloat(lo, -8, scale);
      y[2 * i + 1] = CodeToFloat(hi, -8, scale);
    }
    if (m % 2 != 0) y[m - 1] = CodeToFloat(static_cast<int8_t>(c[m / 2] << 4) >> 4, -8, scale);
  }

  absl::string_view Name() const { return bits_ == 8 ? "int8" : "int4"; }

  const int bits_;
  const uint64_t block_;
  const bool stochastic_;
};

}  // namespace

std::unique_ptr<Stage> MakeQuantizeStage(const StageSpec& spec) {
  return std::make_unique<QuantizeStage>(spec);
}

}  // namespace strait::compression
