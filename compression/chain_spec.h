// A codec chain as written in the job spec ("int8+zstd", "topk:0.01:ef+zstd:3"), parsed into typed
// stages: the one parser of the grammar (docs/config.md, "Codec chains"). core checks job specs
// with it, so a bad chain is reported with file:line:column when the spec is loaded; the codecs are
// built from what it returns. Grammar: chain = stage ("+" stage)*; stage = name (":" param)*.
//   none               alone: raw fp32
//   fp16 | bf16        casts, round to nearest even
//   int8 | int4        per-block absmax quantization; params: block size (even, [2, 65536], default
//                      256) and/or "sr" (stochastic rounding), in any order
//   topk:R[:ef]        keep the fraction 0 < R <= 1 of largest magnitudes; "ef": error feedback
//   shuffle            byte-plane transpose (lossless)
//   zstd[:L]           zstd at level L in [-7, 22], L != 0 (default 1)
//   proj:K[:SEED]      project rows of the tensor (its last dimension d) onto K <= d orthonormal
//                      directions drawn from SEED (a u64, default kDefaultBasisSeed); K in
//                      [1, 65536]
//   klt:STEP[:sr|:dither][:fisher]
//                      transform coding in a basis the link learns (klt_stage.cc): one uniform
//                      step of STEP x the coefficients' rms, STEP in [0.001, 16], rounded to
//                      nearest, stochastically ("sr"), or stochastically with the receiver
//                      subtracting the rounding's noise where that leaves less error ("dither":
//                      unbiased like sr, about half its error for the same bytes),
//                      entropy-coded; "fisher": the noise shaped by the gradients that come back
//                      over the link (the forward's option); the chain's only stage
// proj first when present, then at most one value stage (fp16, bf16, int8, int4, topk), then
// shuffle, then zstd, each at most once. After proj the value stage codes the K coefficients of
// each row: only fp16, bf16, or int8/int4 with block K (one scale a row); without one the
// coefficients travel as fp32.
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/status.h"

namespace strait::compression {

// Wire values: these numbers appear in frame headers, never renumber them.
enum class StageKind : uint8_t {
  kNone = 0,
  kFp16 = 1,
  kBf16 = 2,
  kInt8 = 3,
  kInt4 = 4,
  kTopK = 5,
  kShuffle = 6,
  kZstd = 7,
  kProject = 8,
  kKlt = 9,
};

inline constexpr int kDefaultBlockSize = 256;
inline constexpr int kDefaultZstdLevel = 1;
inline constexpr int kMaxSubspace = 65536;
inline constexpr double kMinKltStep = 0.001, kMaxKltStep = 16.0;
inline constexpr uint64_t kMaxKltWidth = 4096;  // klt: rows (the basis is width^2 values)
inline constexpr uint64_t kMaxKltTablesBytes = 48 * 142 + 64;  // klt: its coder's tables, at most
inline constexpr uint64_t kDefaultBasisSeed = 0x5eed5eed5eed5eedull;

// One stage and its parameters; fields that do not apply to `kind` keep their defaults.
struct StageSpec {
  StageKind kind = StageKind::kNone;
  int block_size = kDefaultBlockSize;       // int8, int4
  bool stochastic = false;                  // int8, int4, klt: stochastic rounding ("sr")
  double fraction = 1.0;                    // topk: kept fraction R in (0, 1]
  bool error_feedback = false;              // topk: "ef"
  int level = kDefaultZstdLevel;            // zstd
  int width = 4;                            // shuffle: element width in bytes, set by the chain
  int subspace = 0;                         // proj: K, the number of directions kept per row
  uint64_t basis_seed = kDefaultBasisSeed;  // proj: seed of the basis (SeededBasis)
  double step = 0.0;                        // klt: quantizer step as a fraction of the rms
  bool fisher = false;                      // klt: noise shaped by the link's gradients
  bool dithered = false;  // klt: stochastic, the receiver subtracts the noise ("dither")

  bool operator==(const StageSpec&) const = default;
};

// A parsed chain: stages in encoding order. Without a value stage the chain starts from raw fp32.
struct ChainSpec {
  absl::InlinedVector<StageSpec, 4> stages;  // at most proj, value, shuffle, zstd

  // The canonical text, with every parameter spelled out ("int8:256+zstd:1"); parses back to an
  // equal ChainSpec.
  std::string ToString() const;
  // True when decoding returns exactly the encoded floats (no proj, no value stage but none).
  bool IsLossless() const;
  // True when some stage keeps per-key state (topk with error feedback).
  bool NeedsResidual() const;
  bool operator==(const ChainSpec&) const = default;
};

// Parses and checks `text`. InvalidArgument names the offending stage and what is allowed, without
// a file position (a caller reading a file adds it). Fills StageSpec::width of shuffle from the
// stage before it (4 after raw fp32, 2 after fp16/bf16, 1 otherwise). Thread-safe.
absl::StatusOr<ChainSpec> ParseChainSpec(absl::string_view text);

// Checks the order rules and parameter ranges of an already typed chain (used on frame headers).
absl::Status ValidateChainSpec(const ChainSpec& chain);

// True for fp16, bf16, int8, int4, topk, klt, none: the stages that turn floats into bytes (proj
// turns floats into fewer floats: not one of them).
bool IsValueStage(StageKind kind);

// The chain's first stage when it is one that compression/cuda's kernels and every compute backend
// (site Backend::EncodeValues) write byte for byte where a tensor lives: none, fp16, bf16, int8 or
// int4, with no proj before it. Null otherwise (proj, topk, a chain without a value stage).
const StageSpec* DeviceValueStage(const ChainSpec& chain);

// The chain's proj stage (always its first), or null.
const StageSpec* FindProject(const ChainSpec& chain);

// "int8", "zstd", ...; "?" for a value outside the enum.
absl::string_view StageName(StageKind kind);

}  // namespace strait::compression
