// Syntax of a codec chain as written in the job spec ("int8+zstd", "topk:0.01:ef+zstd:3").
//
// core checks the syntax so that a bad chain is reported with file:line:column when the job spec is
// loaded; the compression library owns the codecs themselves and parses the same grammar
// (docs/config.md, "Codec chains"). Grammar: chain = stage ("+" stage)*; stage = name (":" param)*.
//   none                 alone: no compression (raw fp32)
//   fp16 | bf16          casts (round to nearest even)
//   int8 | int4          per-block absmax quantization; params: block size N (default 256), "sr"
//                        (stochastic rounding)
//   topk:R               keep the fraction 0 < R <= 1 of largest magnitudes; param "ef": error
//   feedback shuffle              byte-plane transpose (lossless) zstd | zstd:L        zstd at
//   level L in [-7, 22], L != 0 (default 1)
// At most one value stage (fp16, bf16, int8, int4, topk), first; then shuffle and zstd, each at
// most once, shuffle before zstd.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strait {

struct CodecStageSyntax {
  std::string name;                 // "int8", "zstd", ...
  std::vector<std::string> params;  // The ":"-separated parameters, verbatim.
};

// Splits and checks a chain. The error message names the offending stage and what is allowed; it
// has no file position (the caller adds it). Thread-safe.
absl::StatusOr<std::vector<CodecStageSyntax>> ParseCodecChainSyntax(absl::string_view chain);

// True when the chain decodes to exactly the bytes it encoded (none, shuffle, zstd only).
bool IsLosslessChain(const std::vector<CodecStageSyntax>& stages);

}  // namespace strait
