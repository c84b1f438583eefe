// fp16 and bf16 casts: 2 bytes per value, round to nearest even, NaN and Inf preserved.
#include <cstring>

#include "compression/codec_stage.h"
#include "compression/float_bits.h"
#include "compression/vectorize.h"

namespace strait::compression {
namespace {

template <uint16_t (*kToBits)(float)>
STRAIT_VECTOR_CLONES void CastLoop(const float* __restrict x, size_t n, uint8_t* __restrict y) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h = kToBits(x[i]);
    std::memcpy(y + 2 * i, &h, 2);
  }
}

template <float (*kFromBits)(uint16_t)>
STRAIT_VECTOR_CLONES void UncastLoop(const uint8_t* __restrict x, size_t n, float* __restrict y) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, x + 2 * i, 2);
    y[i] = kFromBits(h);
  }
}

template <uint16_t (*kToBits)(float), float (*kFromBits)(uint16_t)>
class CastStage final : public CodecStage {
 public:
  explicit CastStage(absl::string_view name) : name_(name) {}

  absl::Status Encode(absl::Span<const uint8_t> in, const EncodeContext& context,
                      ByteBuffer* out) override {
    const size_t n = context.element_count;
    size_t base = out->size();
    out->Resize(base + 2 * n);
    CastLoop<kToBits>(reinterpret_cast<const float*>(in.data()), n, out->data() + base);
    return absl::OkStatus();
  }

  absl::Status CheckSizes(uint64_t decoded_size, uint64_t encoded_size) const override {
    if (decoded_size / 2 != encoded_size) return SizeError(name_, decoded_size / 2, encoded_size);
    return absl::OkStatus();
  }

  absl::Status Decode(absl::Span<const uint8_t> in, absl::Span<uint8_t> out) override {
    STRAIT_RETURN_IF_ERROR(CheckSizes(out.size(), in.size()));
    UncastLoop<kFromBits>(in.data(), out.size() / 4, reinterpret_cast<float*>(out.data()));
    return absl::OkStatus();
  }

 private:
  absl::string_view name_;
};

}  // namespace

std::unique_ptr<CodecStage> MakeCastStage(StageKind kind) {
  if (kind == StageKind::kFp16) {
    return std::make_unique<CastStage<FloatToHalfBits, HalfBitsToFloat>>("fp16");
  }
  return std::make_unique<CastStage<FloatToBf16Bits, Bf16BitsToFloat>>("bf16");
}

}  // namespace strait::compression
