#include "core/codec_chain_syntax.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace strait {
namespace {

constexpr absl::string_view kStages =
    "none, fp16, bf16, int8[:BLOCK][:sr], int4[:BLOCK][:sr], topk:R[:ef], shuffle, zstd[:LEVEL]";

bool IsValueStage(absl::string_view name) {
  return name == "fp16" || name == "bf16" || name == "int8" || name == "int4" || name == "topk";
}

absl::Status StageError(const CodecStageSyntax& stage, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(
      "codec stage '", stage.name, stage.params.empty() ? "" : ":...", "': ", message));
}

absl::Status CheckQuantizer(const CodecStageSyntax& stage) {
  bool seen_block = false, seen_sr = false;
  for (const std::string& p : stage.params) {
    int block = 0;
    if (p == "sr" && !seen_sr) {
      seen_sr = true;
    } else if (absl::SimpleAtoi(p, &block) && !seen_block) {
      if (block < 2 || block > 65536 || block % 2 != 0) {
        return StageError(
            stage, absl::StrCat("block size must be an even number in [2, 65536], found ", p));
      }
      seen_block = true;
    } else {
      return StageError(
          stage, absl::StrCat("unexpected parameter '", p, "'; expected a block size and/or 'sr'"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckTopK(const CodecStageSyntax& stage) {
  double fraction = 0;
  if (stage.params.empty() || !absl::SimpleAtod(stage.params[0], &fraction) || !(fraction > 0) ||
      fraction > 1) {
    return StageError(stage, "needs the kept fraction R in (0, 1], e.g. topk:0.01");
  }
  for (size_t i = 1; i < stage.params.size(); ++i) {
    if (stage.params[i] != "ef" || i > 1) {
      return StageError(stage, absl::StrCat("unexpected parameter '", stage.params[i],
                                            "'; the only option is 'ef' (error feedback)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckZstd(const CodecStageSyntax& stage) {
  if (stage.params.empty()) return absl::OkStatus();
  int level = 0;
  if (stage.params.size() > 1 || !absl::SimpleAtoi(stage.params[0], &level) || level == 0 ||
      level < -7 || level > 22) {
    return StageError(stage, "level must be an integer in [-7, 22] other than 0, e.g. zstd:3");
  }
  return absl::OkStatus();
}

absl::Status CheckNoParams(const CodecStageSyntax& stage) {
  if (!stage.params.empty()) return StageError(stage, "takes no parameters");
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<CodecStageSyntax>> ParseCodecChainSyntax(absl::string_view chain) {
  std::vector<CodecStageSyntax> stages;
  if (chain.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty codec chain; expected stages joined by '+' from: ", kStages));
  }
  for (absl::string_view text : absl::StrSplit(chain, '+')) {
    std::vector<std::string> parts = absl::StrSplit(text, ':');
    CodecStageSyntax stage{parts[0], {parts.begin() + 1, parts.end()}};
    if (stage.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("empty stage in codec chain '", chain,
                                                     "'; stages are joined by a single '+'"));
    }
    absl::Status s;
    if (stage.name == "int8" || stage.name == "int4") {
      s = CheckQuantizer(stage);
    } else if (stage.name == "topk") {
      s = CheckTopK(stage);
    } else if (stage.name == "zstd") {
      s = CheckZstd(stage);
    } else if (stage.name == "none" || stage.name == "fp16" || stage.name == "bf16" ||
               stage.name == "shuffle") {
      s = CheckNoParams(stage);
    } else {
      s = absl::InvalidArgumentError(
          absl::StrCat("unknown codec stage '", stage.name, "'; expected one of ", kStages));
    }
    if (!s.ok()) return s;
    stages.push_back(std::move(stage));
  }

  // Order: [value stage] [shuffle] [zstd]; "none" alone.
  int previous_rank = -1;
  for (size_t i = 0; i < stages.size(); ++i) {
    const std::string& name = stages[i].name;
    if (name == "none") {
      if (stages.size() > 1) {
        return absl::InvalidArgumentError("'none' must be the only stage of a codec chain");
      }
      continue;
    }
    int rank = IsValueStage(name) ? 0 : (name == "shuffle" ? 1 : 2);
    if (rank <= previous_rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage '", name, "' cannot follow '", stages[i - 1].name, "' in codec chain '", chain,
          "'; order is: at most one of fp16/bf16/int8/int4/topk, then shuffle, then zstd"));
    }
    previous_rank = rank;
  }
  return stages;
}

bool IsLosslessChain(const std::vector<CodecStageSyntax>& stages) {
  for (const CodecStageSyntax& stage : stages) {
    if (IsValueStage(stage.name)) return false;
  }
  return true;
}

}  // namespace strait
