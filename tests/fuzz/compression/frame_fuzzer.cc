// Any bytes as a frame: TensorDecoder must return a Status, never crash, read or write out of
// bounds, or allocate past its limit, whether it decodes the whole frame or stops before its value
// stage (DecodeValuePayload, for decoders on a GPU). A frame that decodes is re-encoded with its
// own chain and decoded again; for lossless chains the values must come back bit for bit; and its
// value payload, finished by the chain (EncodeValuePayload), makes the same frame again.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "compression/codec_chain.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strait::compression;
  CodecOptions options;
  options.max_raw_bytes = 1 << 22;
  static TensorDecoder* decoder = new TensorDecoder(options);
  static TensorDecoder* payload_decoder = new TensorDecoder(options);
  DecodedPayload payload;
  const bool has_payload =
      payload_decoder->DecodeValuePayload(absl::MakeConstSpan(data, size), &payload).ok();
  DecodedTensor out;
  if (!decoder->Decode(absl::MakeConstSpan(data, size), &out).ok()) return 0;
  std::unique_ptr<CodecChain> chain = CodecChain::Create(out.chain, options);
  ResidualStore residuals;
  absl::StatusOr<absl::Span<const uint8_t>> frame =
      chain->Encode(out.values, out.shape, &residuals, "fuzz");
  // klt refuses values beyond 1e30, which only a forged frame decodes to.
  if (!frame.ok() && out.chain.stages[0].kind == StageKind::kKlt) return 0;
  if (!frame.ok()) abort();
  DecodedTensor again;
  if (!chain->Decode(*frame, &again).ok()) abort();
  if (again.values.size() != out.values.size()) abort();
  if (out.chain.IsLossless() && !out.values.empty() &&
      std::memcmp(again.values.data(), out.values.data(), 4 * out.values.size()) != 0) {
    abort();
  }
  if (has_payload && out.chain.stages[0].kind != StageKind::kTopK) {
    std::unique_ptr<CodecChain> finisher = CodecChain::Create(out.chain, options);
    absl::StatusOr<absl::Span<const uint8_t>> refinished =
        finisher->EncodeValuePayload(payload.value_payload, payload.shape);
    if (!refinished.ok()) abort();
    DecodedTensor from_payload;
    if (!chain->Decode(*refinished, &from_payload).ok() ||
        from_payload.values.size() != out.values.size() ||
        (!out.values.empty() &&
         std::memcmp(from_payload.values.data(), out.values.data(), 4 * out.values.size()) != 0)) {
      abort();
    }
  }
  return 0;
}
