#include "compression/chain_spec.h"

#include <charconv>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace strait::compression {
namespace {

constexpr absl::string_view kStages =
    "none, fp16, bf16, int8[:BLOCK][:sr], int4[:BLOCK][:sr], topk:R[:ef], shuffle, zstd[:LEVEL], "
    "proj:K[:SEED], klt:STEP[:sr|:dither][:fisher]";

// "codec stage 'int8': ..." when the stage has no parameters, "codec stage 'int8:...': ..." when it
// has some (the caller shows the whole chain, or the job spec's line and column).
absl::Status StageError(absl::string_view name, const std::vector<std::string>& params,
                        absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("codec stage '", name, params.empty() ? "" : ":...", "': ", message));
}

bool ValidBlockSize(int block) { return block >= 2 && block <= 65536 && block % 2 == 0; }
bool ValidFraction(double fraction) { return fraction > 0 && fraction <= 1; }
bool ValidLevel(int level) { return level != 0 && level >= -7 && level <= 22; }
bool ValidSubspace(int k) { return k >= 1 && k <= kMaxSubspace; }
bool ValidStep(double step) { return step >= kMinKltStep && step <= kMaxKltStep; }

// int8 | int4 [:BLOCK] [:sr], in any order, each at most once.
absl::Status ParseQuantizer(absl::string_view name, const std::vector<std::string>& params,
                            StageSpec* stage) {
  bool seen_block = false, seen_sr = false;
  for (const std::string& p : params) {
    int block = 0;
    if (p == "sr" && !seen_sr) {
      seen_sr = stage->stochastic = true;
    } else if (absl::SimpleAtoi(p, &block) && !seen_block) {
      if (!ValidBlockSize(block)) {
        return StageError(
            name, params,
            absl::StrCat("block size must be an even number in [2, 65536], found ", p));
      }
      seen_block = true;
      stage->block_size = block;
    } else {
      return StageError(
          name, params,
          absl::StrCat("unexpected parameter '", p, "'; expected a block size and/or 'sr'"));
    }
  }
  return absl::OkStatus();
}

// topk:R [:ef]
absl::Status ParseTopK(const std::vector<std::string>& params, StageSpec* stage) {
  if (params.empty() || !absl::SimpleAtod(params[0], &stage->fraction) ||
      !ValidFraction(stage->fraction)) {
    return StageError("topk", params, "needs the kept fraction R in (0, 1], e.g. topk:0.01");
  }
  for (size_t i = 1; i < params.size(); ++i) {
    if (params[i] != "ef" || i > 1) {
      return StageError("topk", params,
                        absl::StrCat("unexpected parameter '", params[i],
                                     "'; the only option is 'ef' (error feedback)"));
    }
  }
  stage->error_feedback = params.size() == 2;
  return absl::OkStatus();
}

// zstd [:LEVEL]
absl::Status ParseZstd(const std::vector<std::string>& params, StageSpec* stage) {
  if (params.empty()) return absl::OkStatus();
  if (params.size() > 1 || !absl::SimpleAtoi(params[0], &stage->level) ||
      !ValidLevel(stage->level)) {
    return StageError("zstd", params,
                      "level must be an integer in [-7, 22] other than 0, e.g. zstd:3");
  }
  return absl::OkStatus();
}

// proj:K [:SEED]
absl::Status ParseProject(const std::vector<std::string>& params, StageSpec* stage) {
  if (params.empty() || params.size() > 2 || !absl::SimpleAtoi(params[0], &stage->subspace) ||
      !ValidSubspace(stage->subspace)) {
    return StageError("proj", params,
                      absl::StrCat("needs the number of kept directions K in [1, ", kMaxSubspace,
                                   "] and optionally a seed, e.g. proj:112 or proj:112:7"));
  }
  if (params.size() == 2 && !absl::SimpleAtoi(params[1], &stage->basis_seed)) {
    return StageError(
        "proj", params,
        absl::StrCat("seed must be an integer in [0, 2^64), found '", params[1], "'"));
  }
  return absl::OkStatus();
}

// klt:STEP [:sr | :dither] [:fisher]
absl::Status ParseKlt(const std::vector<std::string>& params, StageSpec* stage) {
  if (params.empty() || params.size() > 3 || !absl::SimpleAtod(params[0], &stage->step) ||
      !ValidStep(stage->step)) {
    return StageError("klt", params,
                      absl::StrCat("needs the step STEP in [", kMinKltStep, ", ", kMaxKltStep,
                                   "] (a fraction of the coefficients' rms) and optionally 'sr' "
                                   "or 'dither', and 'fisher', e.g. klt:0.1:fisher forward or "
                                   "klt:0.5:dither backward"));
  }
  for (size_t i = 1; i < params.size(); ++i) {
    const bool sr = params[i] == "sr" && i == 1;
    const bool dither = params[i] == "dither" && i == 1;
    const bool fisher = params[i] == "fisher" && !stage->fisher;
    if (!sr && !dither && !fisher) {
      return StageError("klt", params,
                        absl::StrCat("unexpected parameter '", params[i],
                                     "'; the options are 'sr' (stochastic rounding) or 'dither' "
                                     "(stochastic rounding whose noise the receiver subtracts), "
                                     "then 'fisher' (noise shaped by the link's gradients)"));
    }
    if (fisher) {
      stage->fisher = true;
    } else {
      stage->stochastic = true;
      stage->dithered = dither;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StageSpec> ParseStage(absl::string_view text, absl::string_view chain) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  const std::string& name = parts[0];
  std::vector<std::string> params(parts.begin() + 1, parts.end());
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("empty stage in codec chain '", chain,
                                                   "'; stages are joined by a single '+'"));
  }
  StageSpec stage;
  if (name == "int8" || name == "int4") {
    stage.kind = name == "int8" ? StageKind::kInt8 : StageKind::kInt4;
    STRAIT_RETURN_IF_ERROR(ParseQuantizer(name, params, &stage));
    return stage;
  }
  if (name == "topk") {
    stage.kind = StageKind::kTopK;
    STRAIT_RETURN_IF_ERROR(ParseTopK(params, &stage));
    return stage;
  }
  if (name == "zstd") {
    stage.kind = StageKind::kZstd;
    STRAIT_RETURN_IF_ERROR(ParseZstd(params, &stage));
    return stage;
  }
  if (name == "proj") {
    stage.kind = StageKind::kProject;
    STRAIT_RETURN_IF_ERROR(ParseProject(params, &stage));
    return stage;
  }
  if (name == "klt") {
    stage.kind = StageKind::kKlt;
    STRAIT_RETURN_IF_ERROR(ParseKlt(params, &stage));
    return stage;
  }
  for (StageKind kind :
       {StageKind::kNone, StageKind::kFp16, StageKind::kBf16, StageKind::kShuffle}) {
    if (name == StageName(kind)) {
      if (!params.empty()) return StageError(name, params, "takes no parameters");
      stage.kind = kind;
      return stage;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown codec stage '", name, "'; expected one of ", kStages));
}

int Rank(StageKind kind) {
  if (kind == StageKind::kProject) return 0;
  return IsValueStage(kind) ? 1 : (kind == StageKind::kShuffle ? 2 : 3);
}

int ShuffleWidthAfter(const ChainSpec& chain, size_t index) {
  if (index == 0) return 4;  // raw fp32
  StageKind before = chain.stages[index - 1].kind;
  if (before == StageKind::kFp16 || before == StageKind::kBf16) return 2;
  return before == StageKind::kProject ? 4 : 1;  // after proj: fp32 coefficients
}

std::string ChainText(const ChainSpec& chain, absl::string_view text) {
  return text.empty() ? chain.ToString() : std::string(text);
}

// Order: [proj] [value stage] [shuffle] [zstd], each at most once; "none" alone. `text` is the
// chain as the message shows it; empty: its canonical text (made only on error: frame headers are
// checked on every decode, which must not allocate).
absl::Status CheckOrder(const ChainSpec& chain, absl::string_view text) {
  int previous_rank = -1;
  for (size_t i = 0; i < chain.stages.size(); ++i) {
    const StageKind kind = chain.stages[i].kind;
    if (kind == StageKind::kNone && chain.stages.size() > 1) {
      return absl::InvalidArgumentError("'none' must be the only stage of a codec chain");
    }
    if (kind == StageKind::kKlt && chain.stages.size() > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("'klt' must be the only stage of a codec chain (it entropy-codes its own "
                       "output), found '",
                       ChainText(chain, text), "'"));
    }
    if (kind == StageKind::kProject && i > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("'proj' must be the first stage of a codec chain, found it after '",
                       StageName(chain.stages[i - 1].kind), "' in '", ChainText(chain, text), "'"));
    }
    const int rank = Rank(kind);
    if (rank <= previous_rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage '", StageName(kind), "' cannot follow '", StageName(chain.stages[i - 1].kind),
          "' in codec chain '", ChainText(chain, text),
          "'; order is: at most one of fp16/bf16/int8/int4/topk, then shuffle, then zstd"));
    }
    previous_rank = rank;
  }
  return absl::OkStatus();
}

// What may code proj's coefficients: fp16, bf16, or int8/int4 with one block a row (block K, which
// the quantizers need even). Nothing: fp32 coefficients.
absl::Status CheckAfterProject(const ChainSpec& chain) {
  if (chain.stages.size() < 2 || chain.stages[0].kind != StageKind::kProject) {
    return absl::OkStatus();
  }
  const int k = chain.stages[0].subspace;
  const StageSpec& next = chain.stages[1];
  if (!IsValueStage(next.kind)) return absl::OkStatus();
  auto error = [&](absl::string_view what) {
    ChainSpec alone;
    alone.stages = {next};
    return absl::InvalidArgumentError(
        absl::StrCat("proj:", k, " followed by ", alone.ToString(), ": ", what));
  };
  const bool quantizer = next.kind == StageKind::kInt8 || next.kind == StageKind::kInt4;
  if (!quantizer && next.kind != StageKind::kFp16 && next.kind != StageKind::kBf16) {
    return error(
        "after proj the coefficients are coded by fp16, bf16, int8:K or int4:K, or sent "
        "as fp32 (no value stage)");
  }
  if (quantizer && k % 2 != 0) {
    return error(
        "int8 and int4 after proj need an even K (their block is K, one scale a row); "
        "use an even K, or fp16/bf16");
  }
  if (quantizer && next.block_size != k) {
    return error(absl::StrCat("use ", StageName(next.kind), ":", k, next.stochastic ? ":sr" : "",
                              " (one scale a row of K coefficients)"));
  }
  return absl::OkStatus();
}

std::string FormatDouble(double value) {
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

}  // namespace

const StageSpec* DeviceValueStage(const ChainSpec& chain) {
  if (chain.stages.empty()) return nullptr;
  switch (chain.stages[0].kind) {
    case StageKind::kNone:
    case StageKind::kFp16:
    case StageKind::kBf16:
    case StageKind::kInt8:
    case StageKind::kInt4:
      return &chain.stages[0];
    default:
      return nullptr;
  }
}

bool IsValueStage(StageKind kind) {
  switch (kind) {
    case StageKind::kNone:
    case StageKind::kFp16:
    case StageKind::kBf16:
    case StageKind::kInt8:
    case StageKind::kInt4:
    case StageKind::kTopK:
    case StageKind::kKlt:
      return true;
    default:
      return false;
  }
}

absl::string_view StageName(StageKind kind) {
  switch (kind) {
    case StageKind::kNone:
      return "none";
    case StageKind::kFp16:
      return "fp16";
    case StageKind::kBf16:
      return "bf16";
    case StageKind::kInt8:
      return "int8";
    case StageKind::kInt4:
      return "int4";
    case StageKind::kTopK:
      return "topk";
    case StageKind::kShuffle:
      return "shuffle";
    case StageKind::kZstd:
      return "zstd";
    case StageKind::kProject:
      return "proj";
    case StageKind::kKlt:
      return "klt";
  }
  return "?";
}

absl::Status ValidateChainSpec(const ChainSpec& chain) {
  if (chain.stages.empty()) return absl::InvalidArgumentError("empty codec chain");
  for (const StageSpec& s : chain.stages) {
    if (StageName(s.kind) == "?") return absl::InvalidArgumentError("unknown codec stage kind");
  }
  STRAIT_RETURN_IF_ERROR(CheckOrder(chain, /*text=*/""));
  for (size_t i = 0; i < chain.stages.size(); ++i) {
    const StageSpec& s = chain.stages[i];
    bool ok = true;
    switch (s.kind) {
      case StageKind::kInt8:
      case StageKind::kInt4:
        ok = ValidBlockSize(s.block_size);
        break;
      case StageKind::kTopK:
        ok = ValidFraction(s.fraction);
        break;
      case StageKind::kZstd:
        ok = ValidLevel(s.level);
        break;
      case StageKind::kShuffle:
        ok = s.width == ShuffleWidthAfter(chain, i);
        break;
      case StageKind::kProject:
        ok = ValidSubspace(s.subspace);
        break;
      case StageKind::kKlt:
        ok = ValidStep(s.step) && (!s.dithered || s.stochastic);
        break;
      default:
        break;
    }
    ok = ok && (!s.dithered || s.kind == StageKind::kKlt);
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("codec stage '", StageName(s.kind), "': parameter out of range"));
    }
  }
  return CheckAfterProject(chain);
}

absl::StatusOr<ChainSpec> ParseChainSpec(absl::string_view text) {
  if (text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty codec chain; expected stages joined by '+' from: ", kStages));
  }
  ChainSpec chain;
  for (absl::string_view stage_text : absl::StrSplit(text, '+')) {
    STRAIT_ASSIGN_OR_RETURN(StageSpec stage, ParseStage(stage_text, text));
    chain.stages.push_back(stage);
  }
  STRAIT_RETURN_IF_ERROR(CheckOrder(chain, text));
  STRAIT_RETURN_IF_ERROR(CheckAfterProject(chain));
  for (size_t i = 0; i < chain.stages.size(); ++i) {
    if (chain.stages[i].kind == StageKind::kShuffle) {
      chain.stages[i].width = ShuffleWidthAfter(chain, i);
    }
  }
  return chain;
}

std::string ChainSpec::ToString() const {
  std::string out;
  for (const StageSpec& s : stages) {
    if (!out.empty()) out += '+';
    absl::StrAppend(&out, StageName(s.kind));
    switch (s.kind) {
      case StageKind::kInt8:
      case StageKind::kInt4:
        absl::StrAppend(&out, ":", s.block_size, s.stochastic ? ":sr" : "");
        break;
      case StageKind::kTopK:
        absl::StrAppend(&out, ":", FormatDouble(s.fraction), s.error_feedback ? ":ef" : "");
        break;
      case StageKind::kZstd:
        absl::StrAppend(&out, ":", s.level);
        break;
      case StageKind::kProject:
        absl::StrAppend(&out, ":", s.subspace, ":", s.basis_seed);
        break;
      case StageKind::kKlt:
        absl::StrAppend(&out, ":", FormatDouble(s.step),
                        s.dithered ? ":dither" : (s.stochastic ? ":sr" : ""),
                        s.fisher ? ":fisher" : "");
        break;
      default:
        break;
    }
  }
  return out;
}

bool ChainSpec::IsLossless() const {
  for (const StageSpec& s : stages) {
    if (s.kind == StageKind::kProject) return false;
    if (IsValueStage(s.kind) && s.kind != StageKind::kNone) return false;
  }
  return true;
}

const StageSpec* FindProject(const ChainSpec& chain) {
  if (chain.stages.empty() || chain.stages[0].kind != StageKind::kProject) return nullptr;
  return &chain.stages[0];
}

bool ChainSpec::NeedsResidual() const {
  for (const StageSpec& s : stages) {
    if (s.error_feedback) return true;
  }
  return false;
}

}  // namespace strait::compression
