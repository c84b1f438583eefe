// CodecStage: the one interface every stage of a codec chain implements (not a pipeline stage,
// which is site/nn/stage.h), and the factory that builds a stage from its spec. A value stage
// (none, fp16, bf16, int8, int4, topk, klt) turns fp32 values into bytes; a byte stage (shuffle,
// zstd) turns bytes into bytes; proj turns rows of fp32 values into fewer fp32 values (what it
// writes is the next stage's input). Frames are little-endian.
#pragma once

#include <bit>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "compression/byte_buffer.h"
#include "compression/chain_spec.h"
#include "compression/gradient_moments.h"
#include "compression/klt_math.h"

namespace strait::compression {

static_assert(std::endian::native == std::endian::little, "frames are little-endian");

// What a stage may need besides its input.
struct EncodeContext {
  uint64_t element_count = 0;            // number of fp32 values of the tensor
  absl::Span<float> residual;            // topk:ef: this key's residual, element_count floats
  uint64_t seed = 0;                     // stochastic rounding: noise = f(seed, element index)
  GradientMoments* gradients = nullptr;  // klt:fisher: the link's gradients (none: plain klt)
  uint64_t step = 0;  // klt:fisher: the tensor's optimizer step (it takes the gradients before it)
};

// A stage owns its scratch buffers and library contexts and reuses them: not thread-safe, one
// instance per thread. No call allocates in steady state (same sizes as before).
class CodecStage {
 public:
  virtual ~CodecStage() = default;

  // Appends the encoding of `in` to *out. A value stage reads `in` as element_count fp32 values
  // (4-byte aligned); a byte stage reads any bytes.
  virtual absl::Status Encode(absl::Span<const uint8_t> in, const EncodeContext& context,
                              ByteBuffer* out) = 0;

  // Checks, before anything is allocated, that an encoding of `encoded_size` bytes can decode to
  // `decoded_size` bytes (for a value stage decoded_size is 4 * element_count).
  virtual absl::Status CheckSizes(uint64_t decoded_size, uint64_t encoded_size) const = 0;

  // Decodes `in` into exactly out.size() bytes (a value stage: out.size() / 4 fp32 values, 4-byte
  // aligned). Never reads or writes out of bounds; malformed input gives InvalidArgument.
  virtual absl::Status Decode(absl::Span<const uint8_t> in, absl::Span<uint8_t> out) = 0;

  // The tensor's last dimension (1 for a rank-0 tensor), set by the chain before each frame's
  // Encode, CheckSizes and Decode. Only stages that work on rows (proj, klt) use it.
  virtual void SetRowWidth(uint64_t row_width) { (void)row_width; }
};

// Builds the stage for `spec` (which ParseChainSpec or ValidateChainSpec accepted); a klt stage
// transforms with `klt_math`'s (null: the host's).
std::unique_ptr<CodecStage> MakeCodecStage(const StageSpec& spec,
                                           const KltMathFactory& klt_math = nullptr);

// The factories MakeCodecStage dispatches to, one per file.
std::unique_ptr<CodecStage> MakeNoneStage();
std::unique_ptr<CodecStage> MakeCastStage(StageKind kind);  // fp16 or bf16
std::unique_ptr<CodecStage> MakeQuantizeStage(const StageSpec& spec);
std::unique_ptr<CodecStage> MakeTopKStage(const StageSpec& spec);
std::unique_ptr<CodecStage> MakeShuffleStage(int width);
std::unique_ptr<CodecStage> MakeZstdStage(int level);
std::unique_ptr<CodecStage> MakeProjectStage(const StageSpec& spec);  // project_stage.cc
std::unique_ptr<CodecStage> MakeKltStage(const StageSpec& spec,
                                         const KltMathFactory& math);  // klt_stage.cc

// Error for a size mismatch found while decoding.
absl::Status SizeError(absl::string_view stage, uint64_t expected, uint64_t found);

}  // namespace strait::compression
