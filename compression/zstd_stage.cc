// zstd:L, one-shot compression with a context kept for the stage's lifetime (no allocation per call
// once the context has grown to the tensor size).
#include <memory>

#include "absl/strings/str_cat.h"
#include "compression/codec_stage.h"
#include "compression/zstd_status.h"

namespace strait::compression {
namespace {

struct ZstdFree {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

class ZstdStage final : public CodecStage {
 public:
  explicit ZstdStage(int level) : level_(level) {}

  absl::Status Encode(absl::Span<const uint8_t> in, const EncodeContext&,
                      ByteBuffer* out) override {
    if (!cctx_) {
      cctx_.reset(ZSTD_createCCtx());
      if (!cctx_) return absl::ResourceExhaustedError("zstd: cannot create a compression context");
    }
    size_t base = out->size();
    out->Resize(base + ZSTD_compressBound(in.size()));
    STRAIT_ZSTD_ASSIGN_OR_RETURN(
        size_t written, ZSTD_compressCCtx(cctx_.get(), out->data() + base, out->size() - base,
                                          in.data(), in.size(), level_));
    out->Resize(base + written);
    return absl::OkStatus();
  }

  absl::Status CheckSizes(uint64_t decoded_size, uint64_t encoded_size) const override {
    // A zstd frame is never larger than its bound, and expands at most 32768 times: a block
    // decodes to at most 128 KiB and takes at least 4 bytes (an RLE block). So a short payload
    // cannot make the decoder allocate a large output.
    if (encoded_size == 0 || encoded_size > ZSTD_compressBound(decoded_size) ||
        decoded_size / 32768 > encoded_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("codec stage 'zstd': ", encoded_size, " bytes cannot hold ", decoded_size));
    }
    return absl::OkStatus();
  }

  absl::Status Decode(absl::Span<const uint8_t> in, absl::Span<uint8_t> out) override {
    STRAIT_RETURN_IF_ERROR(CheckSizes(out.size(), in.size()));
    if (!dctx_) {
      dctx_.reset(ZSTD_createDCtx());
      if (!dctx_)
        return absl::ResourceExhaustedError("zstd: cannot create a decompression context");
    }
    // One-shot into the caller's buffer: zstd cannot write past out.size() and allocates no window.
    STRAIT_ZSTD_ASSIGN_OR_RETURN(
        size_t written,
        ZSTD_decompressDCtx(dctx_.get(), out.data(), out.size(), in.data(), in.size()));
    if (written != out.size()) return SizeError("zstd", out.size(), written);
    return absl::OkStatus();
  }

 private:
  const int level_;
  std::unique_ptr<ZSTD_CCtx, ZstdFree> cctx_;
  std::unique_ptr<ZSTD_DCtx, ZstdFree> dctx_;
};

}  // namespace

std::unique_ptr<CodecStage> MakeZstdStage(int level) { return std::make_unique<ZstdStage>(level); }

}  // namespace strait::compression
