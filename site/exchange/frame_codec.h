// A site's side of one link direction (DESIGN.md §5, §6): a tensor becomes the frame the site
// pushes (encoded with the link's codec chain, then sealed with the direction's key), and a frame
// pulled from the gateway becomes a tensor again (opened, then decoded), with every check in
// between. The AAD binds the whole routing key and header, so a frame that is replayed, moved to
// another key, relabelled or altered anywhere is refused before it reaches the model.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compression/codec_chain.h"
#include "compression/gradient_moments.h"
#include "crypto/aead.h"
#include "site/exchange/gateway_link.h"
#include "site/nn/boundary.h"
#include "strait/v1/tensor.pb.h"

namespace strait::site {

// The bytes both ends authenticate for a frame: a versioned, length-prefixed encoding of the key
// and of every header field except the transport's (sequence, bound by the nonce; chunk_count).
std::string FrameAad(const v1::FrameHeader& header);

// Encodes and seals tensors of one link direction. Not thread-safe (one per sending thread).
class FrameEncoder {
 public:
  // `sealer` null: the link is configured with `encryption: false`. `rounding_seed`: stochastic
  // rounding's (compression::StreamSeed of the link direction). `gradients`: what the link's
  // other direction decodes (klt:fisher; FrameDecoder::ForChains adds to it). `klt_math`: where
  // a klt chain transforms (the site's device; null: the host).
  static absl::StatusOr<std::unique_ptr<FrameEncoder>> Create(
      const std::string& chain, std::unique_ptr<crypto::Sealer> sealer,
      uint64_t rounding_seed = compression::CodecOptions{}.seed,
      std::shared_ptr<compression::GradientMoments> gradients = nullptr,
      compression::KltMathFactory klt_math = nullptr);

  struct Frame {
    v1::FrameHeader header;
    std::string body;
    double encode_s = 0.0;  // Time spent in the codec chain.
    double seal_s = 0.0;    // Time spent sealing.
  };
  // `values` row-major with `shape`; `key` is the tensor's routing key. Exact keys (below) are
  // encoded with the lossless chain `none` whatever the link's chain.
  absl::StatusOr<Frame> Encode(const v1::TensorKey& key, absl::Span<const float> values,
                               const std::vector<int64_t>& shape);
  // The frame Encode makes of a tensor of `shape` from `payload`, what the link chain's
  // device_value_stage() wrote for its values with seed SeedOf(its place among the link chain's
  // tensors). InvalidArgument for an exact key; FailedPrecondition for a chain without that stage.
  absl::StatusOr<Frame> EncodePayload(const v1::TensorKey& key, absl::Span<const uint8_t> payload,
                                      const std::vector<int64_t>& shape);

  // Keys whose tensors must arrive exactly (clipping scalars, tied-embedding gradients, layer
  // moves, replica sums: both ends compute the same sums from them).
  static bool Exact(const v1::TensorKey& key);
  // For a sender whose tensors are quantized elsewhere (a backend, on the compute thread): the link
  // chain's first stage when a backend runs it (compression::DeviceValueStage; null otherwise), and
  // the stochastic-rounding seed of the link chain's tensor number `index` (0-based, in Encode and
  // EncodePayload order, exact keys not counted). Immutable: callable from any thread.
  const compression::StageSpec* device_value_stage() const {
    return compression::DeviceValueStage(chain_->spec());
  }
  uint64_t SeedOf(uint64_t index) const { return chain_->SeedOf(index); }
  // Opaque bytes (dtype BYTES: a teacher's targets, site/exchange/teacher_targets_codec.h), sealed
  // as they are; no codec chain.
  absl::StatusOr<Frame> EncodeBytes(const v1::TensorKey& key, std::string_view bytes);

 private:
  // The frame of a tensor of `shape` (`elements` floats) that `chain` encoded into `encoded`
  // since `encode_start`: its header, and its body sealed (Seal).
  absl::StatusOr<Frame> TensorFrame(const v1::TensorKey& key, const compression::ChainSpec& chain,
                                    absl::Span<const uint8_t> encoded,
                                    const std::vector<int64_t>& shape, uint64_t elements,
                                    std::chrono::steady_clock::time_point encode_start);
  // Fills the frame's body with `encoded`, sealed when the link is encrypted, and the header's
  // sizes, sequence and key epoch.
  absl::Status Seal(std::string_view encoded, Frame& frame);

  FrameEncoder(std::unique_ptr<compression::CodecChain> chain,
               std::unique_ptr<compression::CodecChain> lossless,
               std::unique_ptr<crypto::Sealer> sealer)
      : chain_(std::move(chain)), lossless_(std::move(lossless)), sealer_(std::move(sealer)) {}
  std::unique_ptr<compression::CodecChain> chain_, lossless_;
  std::unique_ptr<crypto::Sealer> sealer_;
  compression::ResidualStore residuals_;  // Error feedback (topk:R:ef), per tensor key.
};

// Time a FrameDecoder spent, added up over calls.
struct DecodeTimings {
  double open_s = 0.0;
  double decode_s = 0.0;
};

// A link tensor as FrameDecoder::DecodeBoundary leaves it: the payload of its chain's value stage,
// for the compute backend to decode where the tensor is used, or its floats when a backend does not
// run that chain's first stage (proj, topk). in() points into it.
struct DecodedBoundary {
  std::vector<float> values;
  compression::DecodedPayload payload;
  bool encoded = false;
  BoundaryIn in() const {
    return encoded ? BoundaryIn(payload.chain.stages[0], payload.value_payload)
                   : BoundaryIn(values.data());
  }
};

// Opens and decodes frames of one link direction. Not thread-safe (one per receiving thread).
class FrameDecoder {
 public:
  // `opener` null: the link is configured with `encryption: false` (then sealed frames are
  // refused). `klt_math`: where a klt chain transforms back (null: the host).
  FrameDecoder(std::unique_ptr<crypto::Opener> opener, uint64_t max_raw_bytes,
               compression::KltMathFactory klt_math = nullptr);
  // A decoder that refuses frames of any codec chain but `chains` (a link direction's chain and
  // "none", which exact keys use; compression::TensorDecoder::AcceptOnly). InvalidArgument for a
  // chain that does not parse. With `gradients`, Decode adds every tensor of chains[0] to it (a
  // link's backward, for its forward's klt:fisher encoder; DecodeBoundary's tensors are not).
  static absl::StatusOr<std::unique_ptr<FrameDecoder>> ForChains(
      std::unique_ptr<crypto::Opener> opener, uint64_t max_raw_bytes,
      const std::vector<std::string>& chains,
      std::shared_ptr<compression::GradientMoments> gradients = nullptr,
      compression::KltMathFactory klt_math = nullptr);
  // ForChains with "none" alone: a link whose sender always encodes losslessly (ties, sums,
  // moves, teachers, serving).
  static std::unique_ptr<FrameDecoder> Lossless(std::unique_ptr<crypto::Opener> opener,
                                                uint64_t max_raw_bytes);

  // Checks that the frame answers `expected` (the key that was pulled) with the `expected_shape`
  // (empty: any vector, up to the decoder's max_raw_bytes), opens it and decodes it. Every refusal
  // is INVALID_ARGUMENT or carries a crypto::OpenError.
  absl::StatusOr<std::vector<float>> Decode(const v1::TensorKey& expected,
                                            const std::vector<int64_t>& expected_shape,
                                            ReceivedFrame frame, DecodeTimings* timings = nullptr);
  // Decode's checks, stopping before the value stage when a backend runs it (DecodedBoundary).
  absl::StatusOr<DecodedBoundary> DecodeBoundary(const v1::TensorKey& expected,
                                                 const std::vector<int64_t>& expected_shape,
                                                 ReceivedFrame frame,
                                                 DecodeTimings* timings = nullptr);
  // The bytes of a frame EncodeBytes made, checked (at most max_raw_bytes) and opened likewise.
  absl::StatusOr<std::string> DecodeBytes(const v1::TensorKey& expected, ReceivedFrame frame);

 private:
  // Opens the frame's body in place (nothing when the link is not encrypted): its plain size.
  absl::StatusOr<size_t> Open(ReceivedFrame& frame) const;
  // Decode's checks of the header against the key pulled and the boundary's shape, then Open.
  absl::StatusOr<size_t> CheckAndOpen(const v1::TensorKey& expected,
                                      const std::vector<int64_t>& expected_shape,
                                      ReceivedFrame& frame) const;
  // Adds decoded_ (a tensor of optimizer step `step`) to gradients_ when it is of observed_chain_.
  void ObserveDecoded(uint64_t step);
  // The decoded tensor's size and shape against its frame header.
  static absl::Status MatchesHeader(const v1::FrameHeader& header, uint64_t elements,
                                    const compression::Shape& shape);

  std::unique_ptr<crypto::Opener> opener_;
  const uint64_t max_raw_bytes_;
  compression::TensorDecoder decoder_;
  compression::DecodedTensor decoded_;
  std::shared_ptr<compression::GradientMoments> gradients_;
  compression::ChainSpec observed_chain_;  // The chain whose tensors gradients_ gets.
};

}  // namespace strait::site
