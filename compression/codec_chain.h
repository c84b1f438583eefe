// Codec chains: encode a tensor into a self-describing frame and decode any frame back.
//
//   STRAIT_ASSIGN_OR_RETURN(auto chain, CodecChain::Create("int8+zstd"));
//   STRAIT_ASSIGN_OR_RETURN(absl::Span<const uint8_t> frame, chain->Encode(values, shape));
//   TensorDecoder decoder;           // on the receiving side, for frames of any chain
//   DecodedTensor tensor;
//   STRAIT_RETURN_IF_ERROR(decoder.Decode(frame, &tensor));
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compression/byte_buffer.h"
#include "compression/chain_spec.h"
#include "compression/codec_stage.h"
#include "compression/frame_header.h"
#include "compression/residual_store.h"

namespace strait::compression {

struct CodecOptions {
  // Decode refuses frames whose tensor is larger than this (bytes of fp32), before allocating: a
  // header alone cannot make the decoder allocate more than a small multiple of it.
  uint64_t max_raw_bytes = uint64_t{1} << 30;
  // Stochastic rounding draws noise from (seed, call number, element index): reproducible runs.
  uint64_t seed = 0x5eed5eed5eed5eedull;
  // klt:fisher: the gradients that come back over the link this chain sends on (its receiver adds
  // them); without, a fisher basis is a plain one.
  std::shared_ptr<GradientMoments> gradients;
  // Where a klt stage transforms (klt_math.h); null: the host's BLAS.
  KltMathFactory klt_math;
};

// The rounding seed of one of several chains that code related tensors (a job's link directions,
// numbered by the caller): each draws its own noise, so that the rounding errors of two links that
// carry nearly the same gradient do not add up coherently.
uint64_t StreamSeed(uint64_t stream);

// A decoded frame. Reuse one across calls: its buffers then stop allocating.
struct DecodedTensor {
  std::vector<float> values;
  Shape shape;
  ChainSpec chain;
};

// A frame decoded up to its value stage (a device decoder runs that stage itself, e.g. a GPU
// dequantizing where the tensor is used): what the chain's first stage wrote for `element_count`
// values. Reuse one across calls.
struct DecodedPayload {
  std::vector<uint8_t> value_payload;
  uint64_t element_count = 0;
  Shape shape;
  ChainSpec chain;
};

// One chain's encoder and decoder. Owns its stages, their zstd contexts and scratch buffers, reused
// across calls (no allocation per call in steady state). Not thread-safe: one per thread.
class CodecChain {
 public:
  // Parses `spec` (grammar in chain_spec.h). InvalidArgument names the bad stage.
  static absl::StatusOr<std::unique_ptr<CodecChain>> Create(absl::string_view spec,
                                                            const CodecOptions& options = {});
  // `spec` must have passed ValidateChainSpec (ParseChainSpec does that).
  static std::unique_ptr<CodecChain> Create(const ChainSpec& spec,
                                            const CodecOptions& options = {});

  const ChainSpec& spec() const { return spec_; }

  // Encodes `values` (row-major, product of `shape` elements, rank <= 8) into a frame. The span
  // points into this chain's buffer and stays valid until the next Encode. A chain with error
  // feedback (topk:R:ef) needs `residuals` and the tensor's `key`; it reads and updates that
  // key's residual. A chain with proj:K projects rows of shape.back() >= K values (InvalidArgument
  // otherwise); the first encode of a (seed, width, K) builds its basis. `step`: the tensor's
  // optimizer step (klt:fisher fits to the gradients of the steps before step - 1).
  absl::StatusOr<absl::Span<const uint8_t>> Encode(absl::Span<const float> values,
                                                   absl::Span<const uint64_t> shape,
                                                   ResidualStore* residuals = nullptr,
                                                   absl::string_view key = "", uint64_t step = 0);

  // For device encoders (FailedPrecondition for a chain with proj or klt, which only this host
  // codec runs): `payload` is what the chain's first (value) stage produces for a tensor
  // of `shape` (computed elsewhere, e.g. by a CUDA kernel); runs the remaining stages and returns
  // the same frame Encode would. Counts as one Encode for the stochastic-rounding seed: a device
  // encoder quantizes with next_seed() and then calls this. Span valid until the next Encode.
  absl::StatusOr<absl::Span<const uint8_t>> EncodeValuePayload(absl::Span<const uint8_t> payload,
                                                               absl::Span<const uint64_t> shape);

  // Decodes a frame of this chain (any other chain is InvalidArgument; TensorDecoder takes any).
  // Checks every size against the header and the buffer; malformed input is InvalidArgument, a
  // tensor above max_raw_bytes ResourceExhausted. On error *out is unspecified.
  absl::Status Decode(absl::Span<const uint8_t> frame, DecodedTensor* out);

  // The noise seed the next Encode uses for stochastic rounding.
  uint64_t next_seed() const { return SeedOf(calls_); }
  // The seed of call `call` (0-based) of this chain: a sender whose tensors are quantized on
  // another thread (or device) hands each the seed of its place in the chain's order.
  uint64_t SeedOf(uint64_t call) const;

 private:
  CodecChain(const ChainSpec& spec, const CodecOptions& options);
  absl::StatusOr<absl::Span<const uint8_t>> EncodeFrom(size_t first_stage,
                                                       absl::Span<const uint8_t> in,
                                                       const EncodeContext& context);
  absl::Status DecodeWithHeader(absl::Span<const uint8_t> frame, DecodedTensor* out);
  // Checks the header's size of every stage against the stage (CodecStage::CheckSizes).
  absl::Status CheckStageSizes();
  // Runs the stages from the last down to `last_stage`, writing what stage last_stage decoded into
  // `target` (of the header's size for it). Every size checked first.
  absl::Status DecodeStages(absl::Span<const uint8_t> frame, size_t last_stage,
                            absl::Span<uint8_t> target);

  friend class TensorDecoder;

  ChainSpec spec_;
  CodecOptions options_;
  std::vector<std::unique_ptr<CodecStage>> stages_;
  uint64_t calls_ = 0;
  FrameHeader header_;
  ByteBuffer frame_;
  std::array<ByteBuffer, 2> scratch_;
};

// Decodes encoded tensors (frames of this library's format) of any chain, reading the chain from
// each frame's header; keeps the chains of the last kKeptChains chains it decoded, so a stream of
// frames of a few chains decodes without allocating and a klt chain keeps its link's basis across
// the exact frames ("none") between its own. Knows nothing of sealing or routing:
// site::FrameDecoder opens a sealed frame from the network and then decodes it with one of these.
// Not thread-safe: one per thread.
class TensorDecoder {
 public:
  explicit TensorDecoder(const CodecOptions& options = {}) : options_(options) {}

  // From now on refuses (InvalidArgument) a frame whose chain is none of `chains`, before building
  // anything for it: a link's receiver accepts only the link's agreed chains, so that a sender
  // cannot make it build a new proj basis (up to 2^22 values) with every frame. Empty: any chain.
  void AcceptOnly(std::vector<ChainSpec> chains) { accepted_ = std::move(chains); }

  // Same contract as CodecChain::Decode, for a frame of any chain.
  absl::Status Decode(absl::Span<const uint8_t> frame, DecodedTensor* out);
  // The same checks, stopping before the value stage: out->value_payload is what that stage of
  // out->chain decodes (its sizes already checked against element_count). FailedPrecondition for
  // a chain without a value stage, or with proj or klt.
  absl::Status DecodeValuePayload(absl::Span<const uint8_t> frame, DecodedPayload* out);

 private:
  absl::Status CheckAccepted() const;
  // The chain of `spec`, made when none of the kept ones is it (the oldest then goes).
  CodecChain& ChainFor(const ChainSpec& spec);

  static constexpr size_t kKeptChains = 4;
  CodecOptions options_;
  std::vector<ChainSpec> accepted_;
  FrameHeader header_;
  std::vector<std::unique_ptr<CodecChain>> chains_;
};

}  // namespace strait::compression
