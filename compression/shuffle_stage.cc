// shuffle: byte-plane transpose of `width`-byte elements (byte j of every element, then byte j+1);
// a trailing partial element is copied as is. Lossless; makes float exponents contiguous for zstd.
#include <cstring>

#include "compression/codec_stage.h"

namespace strait::compression {
namespace {

template <int kWidth>
void Transpose(const uint8_t* __restrict in, size_t count, uint8_t* __restrict out) {
  for (size_t i = 0; i < count; ++i) {
    for (int j = 0; j < kWidth; ++j) out[j * count + i] = in[i * kWidth + j];
  }
}

template <int kWidth>
void Untranspose(const uint8_t* __restrict in, size_t count, uint8_t* __restrict out) {
  for (size_t i = 0; i < count; ++i) {
    for (int j = 0; j < kWidth; ++j) out[i * kWidth + j] = in[j * count + i];
  }
}

class ShuffleStage final : public CodecStage {
 public:
  explicit ShuffleStage(int width) : width_(width) {}

  absl::Status Encode(absl::Span<const uint8_t> in, const EncodeContext&,
                      ByteBuffer* out) override {
    size_t base = out->size();
    out->Resize(base + in.size());
    Apply(in.data(), in.size(), out->data() + base, /*forward=*/true);
    return absl::OkStatus();
  }

  absl::Status CheckSizes(uint64_t decoded_size, uint64_t encoded_size) const override {
    if (decoded_size != encoded_size) return SizeError("shuffle", decoded_size, encoded_size);
    return absl::OkStatus();
  }

  absl::Status Decode(absl::Span<const uint8_t> in, absl::Span<uint8_t> out) override {
    STRAIT_RETURN_IF_ERROR(CheckSizes(out.size(), in.size()));
    Apply(in.data(), in.size(), out.data(), /*forward=*/false);
    return absl::OkStatus();
  }

 private:
  void Apply(const uint8_t* in, size_t size, uint8_t* out, bool forward) const {
    const size_t count = size / width_;
    switch (width_) {
      case 4:
        forward ? Transpose<4>(in, count, out) : Untranspose<4>(in, count, out);
        break;
      case 2:
        forward ? Transpose<2>(in, count, out) : Untranspose<2>(in, count, out);
        break;
      default:
        break;  // width 1: identity (the whole buffer is the tail below)
    }
    const size_t done = width_ > 1 ? count * width_ : 0;
    if (size > done) std::memcpy(out + done, in + done, size - done);
  }

  const int width_;
};

}  // namespace

std::unique_ptr<CodecStage> MakeShuffleStage(int width) {
  return std::make_unique<ShuffleStage>(width);
}

}  // namespace strait::compression
