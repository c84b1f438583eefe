#include "compression/codec_stage.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace strait::compression {
namespace {

// `none`: the fp32 values themselves.
class NoneStage final : public CodecStage {
 public:
  absl::Status Encode(absl::Span<const uint8_t> in, const EncodeContext&,
                      ByteBuffer* out) override {
    size_t base = out->size();
    out->Resize(base + in.size());
    if (!in.empty()) std::memcpy(out->data() + base, in.data(), in.size());
    return absl::OkStatus();
  }
  absl::Status CheckSizes(uint64_t decoded_size, uint64_t encoded_size) const override {
    if (decoded_size != encoded_size) return SizeError("none", decoded_size, encoded_size);
    return absl::OkStatus();
  }
  absl::Status Decode(absl::Span<const uint8_t> in, absl::Span<uint8_t> out) override {
    STRAIT_RETURN_IF_ERROR(CheckSizes(out.size(), in.size()));
    if (!in.empty()) std::memcpy(out.data(), in.data(), in.size());
    return absl::OkStatus();
  }
};

}  // namespace

absl::Status SizeError(absl::string_view stage, uint64_t expected, uint64_t found) {
  return absl::InvalidArgumentError(
      absl::StrCat("codec stage '", stage, "': expected ", expected, " bytes, found ", found));
}

std::unique_ptr<CodecStage> MakeNoneStage() { return std::make_unique<NoneStage>(); }

std::unique_ptr<CodecStage> MakeCodecStage(const StageSpec& spec, const KltMathFactory& klt_math) {
  switch (spec.kind) {
    case StageKind::kFp16:
    case StageKind::kBf16:
      return MakeCastStage(spec.kind);
    case StageKind::kInt8:
    case StageKind::kInt4:
      return MakeQuantizeStage(spec);
    case StageKind::kTopK:
      return MakeTopKStage(spec);
    case StageKind::kShuffle:
      return MakeShuffleStage(spec.width);
    case StageKind::kZstd:
      return MakeZstdStage(spec.level);
    case StageKind::kProject:
      return MakeProjectStage(spec);
    case StageKind::kKlt:
      return MakeKltStage(spec, klt_math);
    case StageKind::kNone:
      break;
  }
  return MakeNoneStage();
}

}  // namespace strait::compression
