#include "site/exchange/frame_codec.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace strait::site {
namespace {

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

void PutString(std::string& out, const std::string& s) {
  PutU64(out, s.size());
  out += s;
}

bool SameKey(const v1::TensorKey& a, const v1::TensorKey& b) {
  return a.job() == b.job() && a.step() == b.step() && a.microbatch() == b.microbatch() &&
         a.boundary() == b.boundary() && a.direction() == b.direction() &&
         a.generation() == b.generation() && a.purpose() == b.purpose() &&
         a.replica() == b.replica();
}

}  // namespace

std::string FrameAad(const v1::FrameHeader& header) {
  const v1::TensorKey& key = header.key();
  std::string aad = "strait-frame-v1";
  PutString(aad, key.job());
  for (uint64_t v : {key.step(), uint64_t{key.microbatch()}, uint64_t{key.boundary()},
                     static_cast<uint64_t>(key.direction()), uint64_t{key.generation()},
                     static_cast<uint64_t>(key.purpose())}) {
    PutU64(aad, v);
  }
  // Replicas' pipelines (JobSpec::replicas) after the first; absent for replica 0, so frames
  // without replicas keep the AAD they always had.
  if (key.replica() > 0) PutU64(aad, uint64_t{key.replica()});
  PutString(aad, header.codec_chain());
  PutU64(aad, static_cast<uint64_t>(header.dtype()));
  PutU64(aad, static_cast<uint64_t>(header.shape_size()));
  for (int64_t dim : header.shape()) PutU64(aad, static_cast<uint64_t>(dim));
  for (uint64_t v : {header.raw_bytes(), header.wire_bytes(), uint64_t{header.sealed()},
                     uint64_t{header.key_epoch()}}) {
    PutU64(aad, v);
  }
  return aad;
}

absl::StatusOr<std::unique_ptr<FrameEncoder>> FrameEncoder::Create(
    const std::string& chain, std::unique_ptr<crypto::Sealer> sealer, uint64_t rounding_seed,
    std::shared_ptr<compression::GradientMoments> gradients, compression::KltMathFactory klt_math) {
  STRAIT_ASSIGN_OR_RETURN(
      std::unique_ptr<compression::CodecChain> codec,
      compression::CodecChain::Create(chain, {.seed = rounding_seed,
                                              .gradients = std::move(gradients),
                                              .klt_math = std::move(klt_math)}));
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<compression::CodecChain> lossless,
                          compression::CodecChain::Create("none"));
  return std::unique_ptr<FrameEncoder>(
      new FrameEncoder(std::move(codec), std::move(lossless), std::move(sealer)));
}

absl::StatusOr<FrameEncoder::Frame> FrameEncoder::Encode(const v1::TensorKey& key,
                                                         absl::Span<const float> values,
                                                         const std::vector<int64_t>& shape) {
  compression::Shape dims;
  uint64_t elements = 1;
  for (int64_t d : shape) {
    dims.push_back(static_cast<uint64_t>(d));
    elements *= static_cast<uint64_t>(d);
  }
  if (elements != values.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor of ", values.size(), " values for a shape of ", elements));
  }
  // Error feedback carries over between the tensors of the same purpose and microbatch slot, step
  // after step.
  compression::CodecChain& chain = Exact(key) ? *lossless_ : *chain_;
  const auto start = std::chrono::steady_clock::now();
  STRAIT_ASSIGN_OR_RETURN(
      absl::Span<const uint8_t> encoded,
      chain.Encode(values, dims, &residuals_,
                   absl::StrCat("p", key.purpose(), "m", key.microbatch()), key.step()));
  return TensorFrame(key, chain.spec(), encoded, shape, elements, start);
}

absl::StatusOr<FrameEncoder::Frame> FrameEncoder::TensorFrame(
    const v1::TensorKey& key, const compression::ChainSpec& chain,
    absl::Span<const uint8_t> encoded, const std::vector<int64_t>& shape, uint64_t elements,
    std::chrono::steady_clock::time_point encode_start) {
  const auto encoded_at = std::chrono::steady_clock::now();
  Frame frame;
  frame.encode_s = std::chrono::duration<double>(encoded_at - encode_start).count();
  v1::FrameHeader& header = frame.header;
  *header.mutable_key() = key;
  header.set_codec_chain(chain.ToString());
  header.set_dtype(v1::FLOAT32);
  for (int64_t d : shape) header.add_shape(d);
  header.set_raw_bytes(elements * sizeof(float));
  STRAIT_RETURN_IF_ERROR(
      Seal({reinterpret_cast<const char*>(encoded.data()), encoded.size()}, frame));
  frame.seal_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - encoded_at).count();
  return frame;
}

bool FrameEncoder::Exact(const v1::TensorKey& key) {
  return key.purpose() == v1::CLIP || key.purpose() == v1::TIED || key.purpose() == v1::MOVE ||
         key.purpose() == v1::SUM;
}

absl::StatusOr<FrameEncoder::Frame> FrameEncoder::EncodePayload(const v1::TensorKey& key,
                                                                absl::Span<const uint8_t> payload,
                                                                const std::vector<int64_t>& shape) {
  if (Exact(key)) {
    return absl::InvalidArgumentError("a tensor that must arrive exactly sent as a codec payload");
  }
  if (device_value_stage() == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("codec chain '", chain_->spec().ToString(),
                                                      "' has no value stage a backend runs"));
  }
  compression::Shape dims(shape.begin(), shape.end());
  const auto start = std::chrono::steady_clock::now();
  STRAIT_ASSIGN_OR_RETURN(absl::Span<const uint8_t> encoded,
                          chain_->EncodeValuePayload(payload, dims));
  STRAIT_ASSIGN_OR_RETURN(const uint64_t elements, compression::ElementCount(dims));
  return TensorFrame(key, chain_->spec(), encoded, shape, elements, start);
}

absl::StatusOr<FrameEncoder::Frame> FrameEncoder::EncodeBytes(const v1::TensorKey& key,
                                                              std::string_view bytes) {
  if (bytes.empty()) return absl::InvalidArgumentError("a frame of bytes needs at least one");
  Frame frame;
  v1::FrameHeader& header = frame.header;
  *header.mutable_key() = key;
  header.set_codec_chain("bytes");
  header.set_dtype(v1::BYTES);
  header.add_shape(static_cast<int64_t>(bytes.size()));
  header.set_raw_bytes(bytes.size());
  const auto start = std::chrono::steady_clock::now();
  STRAIT_RETURN_IF_ERROR(Seal(bytes, frame));
  frame.seal_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return frame;
}

absl::Status FrameEncoder::Seal(std::string_view encoded, Frame& frame) {
  v1::FrameHeader& header = frame.header;
  const size_t sealed_size = encoded.size() + (sealer_ ? crypto::kTagSize : 0);
  header.set_wire_bytes(sealed_size);
  header.set_sealed(sealer_ != nullptr);
  frame.body.resize(sealed_size);
  std::copy(encoded.begin(), encoded.end(), frame.body.begin());
  if (!sealer_) return absl::OkStatus();
  header.set_key_epoch(sealer_->key_epoch());
  const std::string aad = FrameAad(header);
  auto* bytes = reinterpret_cast<uint8_t*>(frame.body.data());
  STRAIT_ASSIGN_OR_RETURN(
      uint64_t sequence,
      sealer_->SealInPlace({reinterpret_cast<const uint8_t*>(aad.data()), aad.size()},
                           {bytes, frame.body.size()}, encoded.size()));
  header.set_sequence(sequence);
  return absl::OkStatus();
}

FrameDecoder::FrameDecoder(std::unique_ptr<crypto::Opener> opener, uint64_t max_raw_bytes,
                           compression::KltMathFactory klt_math)
    : opener_(std::move(opener)),
      max_raw_bytes_(max_raw_bytes),
      decoder_({.max_raw_bytes = max_raw_bytes, .klt_math = std::move(klt_math)}) {}

absl::StatusOr<std::unique_ptr<FrameDecoder>> FrameDecoder::ForChains(
    std::unique_ptr<crypto::Opener> opener, uint64_t max_raw_bytes,
    const std::vector<std::string>& chains, std::shared_ptr<compression::GradientMoments> gradients,
    compression::KltMathFactory klt_math) {
  std::vector<compression::ChainSpec> specs;
  for (const std::string& chain : chains) {
    STRAIT_ASSIGN_OR_RETURN(specs.emplace_back(), compression::ParseChainSpec(chain));
  }
  auto decoder =
      std::make_unique<FrameDecoder>(std::move(opener), max_raw_bytes, std::move(klt_math));
  if (gradients != nullptr && !specs.empty()) {
    decoder->gradients_ = std::move(gradients);
    decoder->observed_chain_ = specs[0];
  }
  decoder->decoder_.AcceptOnly(std::move(specs));
  return decoder;
}

std::unique_ptr<FrameDecoder> FrameDecoder::Lossless(std::unique_ptr<crypto::Opener> opener,
                                                     uint64_t max_raw_bytes) {
  return *ForChains(std::move(opener), max_raw_bytes, {"none"});  // "none" always parses
}

absl::StatusOr<size_t> FrameDecoder::CheckAndOpen(const v1::TensorKey& expected,
                                                  const std::vector<int64_t>& expected_shape,
                                                  ReceivedFrame& frame) const {
  const v1::FrameHeader& header = frame.header;
  if (!SameKey(header.key(), expected)) {
    return absl::InvalidArgumentError("frame carries another tensor key than the one pulled");
  }
  const bool any_length = expected_shape.empty() && header.shape_size() == 1;
  if (!any_length &&
      (header.shape_size() != static_cast<int>(expected_shape.size()) ||
       !std::equal(expected_shape.begin(), expected_shape.end(), header.shape().begin()))) {
    return absl::InvalidArgumentError("frame has another shape than this boundary carries");
  }
  if (header.dtype() != v1::FLOAT32) {
    return absl::InvalidArgumentError("frame carries bytes where this link carries a tensor");
  }
  return Open(frame);
}

absl::Status FrameDecoder::MatchesHeader(const v1::FrameHeader& header, uint64_t elements,
                                         const compression::Shape& shape) {
  if (elements * sizeof(float) != header.raw_bytes() ||
      !std::equal(shape.begin(), shape.end(), header.shape().begin(), header.shape().end(),
                  [](uint64_t a, int64_t b) { return a == static_cast<uint64_t>(b); })) {
    return absl::InvalidArgumentError("decoded tensor does not match its frame header");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> FrameDecoder::Decode(const v1::TensorKey& expected,
                                                        const std::vector<int64_t>& expected_shape,
                                                        ReceivedFrame frame,
                                                        DecodeTimings* timings) {
  const auto start = std::chrono::steady_clock::now();
  STRAIT_ASSIGN_OR_RETURN(const size_t size, CheckAndOpen(expected, expected_shape, frame));
  const auto opened_at = std::chrono::steady_clock::now();
  STRAIT_RETURN_IF_ERROR(
      decoder_.Decode({reinterpret_cast<uint8_t*>(frame.body.data()), size}, &decoded_));
  if (timings != nullptr) {
    timings->open_s += std::chrono::duration<double>(opened_at - start).count();
    timings->decode_s +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - opened_at).count();
  }
  STRAIT_RETURN_IF_ERROR(MatchesHeader(frame.header, decoded_.values.size(), decoded_.shape));
  ObserveDecoded(frame.header.key().step());
  return std::move(decoded_.values);
}

void FrameDecoder::ObserveDecoded(uint64_t step) {
  if (gradients_ != nullptr && decoded_.chain == observed_chain_ && !decoded_.shape.empty()) {
    gradients_->Add(decoded_.values, decoded_.shape.back(), step);
  }
}

absl::StatusOr<DecodedBoundary> FrameDecoder::DecodeBoundary(
    const v1::TensorKey& expected, const std::vector<int64_t>& expected_shape, ReceivedFrame frame,
    DecodeTimings* timings) {
  const auto start = std::chrono::steady_clock::now();
  STRAIT_ASSIGN_OR_RETURN(const size_t size, CheckAndOpen(expected, expected_shape, frame));
  const auto opened_at = std::chrono::steady_clock::now();
  const absl::Span<const uint8_t> bytes(reinterpret_cast<uint8_t*>(frame.body.data()), size);
  DecodedBoundary out;
  absl::Status payload = decoder_.DecodeValuePayload(bytes, &out.payload);
  // A chain whose value stage the backends do not run (proj, topk, none at all) decodes here.
  out.encoded = payload.ok() && compression::DeviceValueStage(out.payload.chain) != nullptr;
  if (payload.ok() || payload.code() == absl::StatusCode::kFailedPrecondition) {
    payload = out.encoded
                  ? MatchesHeader(frame.header, out.payload.element_count, out.payload.shape)
                  : decoder_.Decode(bytes, &decoded_);
  }
  if (timings != nullptr) {
    timings->open_s += std::chrono::duration<double>(opened_at - start).count();
    timings->decode_s +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - opened_at).count();
  }
  STRAIT_RETURN_IF_ERROR(payload);
  if (!out.encoded) {
    STRAIT_RETURN_IF_ERROR(MatchesHeader(frame.header, decoded_.values.size(), decoded_.shape));
    ObserveDecoded(frame.header.key().step());
    out.values = std::move(decoded_.values);
  }
  return out;
}

absl::StatusOr<std::string> FrameDecoder::DecodeBytes(const v1::TensorKey& expected,
                                                      ReceivedFrame frame) {
  const v1::FrameHeader& header = frame.header;
  if (!SameKey(header.key(), expected)) {
    return absl::InvalidArgumentError("frame carries another tensor key than the one pulled");
  }
  if (header.dtype() != v1::BYTES || header.shape_size() != 1) {
    return absl::InvalidArgumentError("frame carries a tensor where this link carries bytes");
  }
  if (header.raw_bytes() > max_raw_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame of ", header.raw_bytes(), " bytes; this link carries at most ", max_raw_bytes_));
  }
  STRAIT_ASSIGN_OR_RETURN(const size_t size, Open(frame));
  if (size != header.raw_bytes() || size != static_cast<uint64_t>(header.shape(0))) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame of ", size, " bytes says it holds ", header.raw_bytes()));
  }
  frame.body.resize(size);
  return std::move(frame.body);
}

absl::StatusOr<size_t> FrameDecoder::Open(ReceivedFrame& frame) const {
  const v1::FrameHeader& header = frame.header;
  if (header.sealed() != (opener_ != nullptr)) {
    return absl::InvalidArgumentError(opener_ ? "frame is not sealed but this link is encrypted"
                                              : "frame is sealed but this link is not encrypted");
  }
  if (!opener_) return frame.body.size();
  const std::string aad = FrameAad(header);
  return opener_->OpenInPlace({header.sequence(), header.key_epoch(), header.wire_bytes()},
                              {reinterpret_cast<const uint8_t*>(aad.data()), aad.size()},
                              {reinterpret_cast<uint8_t*>(frame.body.data()), frame.body.size()});
}

}  // namespace strait::site
