// int8 and int4 quantization with per-block absmax scales, round to nearest even or stochastic.
#include "compression/quantize_stage.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compression/codec_stage.h"
#include "compression/float_bits.h"
#include "compression/vectorize.h"

namespace strait::compression {
namespace {

int32_t BlockAbsMax(const float* __restrict x, size_t m) {
  int32_t amax = 0;
  for (size_t i = 0; i < m; ++i) amax = std::max(amax, FiniteAbsBits(x[i]));
  return amax;
}

template <bool kStochastic>
void QuantizeCodes(const float* __restrict x, size_t m, const QuantScale& s, int32_t qmax,
                   uint64_t seed, uint64_t first, int8_t* __restrict codes) {
  for (size_t i = 0; i < m; ++i) {
    float noise = kStochastic ? RoundingNoise(seed, first + i) : 0.0f;
    codes[i] = static_cast<int8_t>(QuantizeValue(x[i], s, qmax, kStochastic, noise, -qmax - 1));
  }
}

// int4: codes of a chunk as bytes first, then packed two per byte (even element low), which
// vectorises better than quantizing pairs.
template <bool kStochastic>
void QuantizeInt4Block(const float* __restrict x, size_t m, const QuantScale& s, uint64_t seed,
                       uint64_t first, uint8_t* __restrict packed) {
  constexpr size_t kChunk = 512;
  int8_t codes[kChunk];
  for (size_t done = 0; done < m; done += kChunk) {
    const size_t c = std::min(kChunk, m - done);
    QuantizeCodes<kStochastic>(x + done, c, s, 7, seed, first + done, codes);
    if (c % 2 != 0) codes[c] = 0;  // only the tensor's last block can be odd: padding nibble
    uint8_t* out = packed + done / 2;
    for (size_t i = 0; i < (c + 1) / 2; ++i) {
      out[i] = static_cast<uint8_t>((codes[2 * i] & 0xf) | ((codes[2 * i + 1] & 0xf) << 4));
    }
  }
}

// The whole tensor in one function, so that the block loops inline into each clone.
template <int kBits, bool kStochastic>
STRAIT_VECTOR_CLONES void QuantizeTensor(const float* x, uint64_t n, uint64_t block, uint64_t seed,
                                         uint8_t* out) {
  const uint64_t blocks = BlockCount(n, block);
  uint8_t* codes = out + 4 * blocks;
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t first = b * block;
    const size_t m = static_cast<size_t>(std::min<uint64_t>(block, n - first));
    QuantScale s = MakeQuantScale(BlockAbsMax(x + first, m), kBits == 8 ? 127.0f : 7.0f);
    std::memcpy(out + 4 * b, &s.scale, 4);
    if (kBits == 8) {
      QuantizeCodes<kStochastic>(x + first, m, s, 127, seed, first,
                                 reinterpret_cast<int8_t*>(codes + first));
    } else {  // block sizes are even: every block starts on a byte
      QuantizeInt4Block<kStochastic>(x + first, m, s, seed, first, codes + first / 2);
    }
  }
}

float CodeToFloat(int32_t code, int32_t nan_code, float scale) {
  return code == nan_code ? BitsFloat(0x7fc00000u) : static_cast<float>(code) * scale;
}

class QuantizeStage final : public CodecStage {
 public:
  explicit QuantizeStage(const StageSpec& spec)
      : bits_(spec.kind == StageKind::kInt8 ? 8 : 4),
        block_(spec.block_size),
        stochastic_(spec.stochastic) {}

  absl::Status Encode(absl::Span<const uint8_t> in, const EncodeContext& context,
                      ByteBuffer* out) override {
    const uint64_t n = context.element_count;
    size_t base = out->size();
    out->Resize(base + QuantizedSize(bits_, n, block_));
    const float* x = reinterpret_cast<const float*>(in.data());
    uint8_t* y = out->data() + base;
    if (bits_ == 8) {
      stochastic_ ? QuantizeTensor<8, true>(x, n, block_, context.seed, y)
                  : QuantizeTensor<8, false>(x, n, block_, context.seed, y);
    } else {
      stochastic_ ? QuantizeTensor<4, true>(x, n, block_, context.seed, y)
                  : QuantizeTensor<4, false>(x, n, block_, context.seed, y);
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

std::unique_ptr<CodecStage> MakeQuantizeStage(const StageSpec& spec) {
  return std::make_unique<QuantizeStage>(spec);
}

}  // namespace strait::compression
