#include "compression/chain_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"

namespace strait::compression {
namespace {

// The chains docs/config.md shows, and the edges of every parameter's range.
TEST(ChainSpecTest, AcceptsDocumentedChains) {
  for (const char* chain : {"none",
                            "fp16",
                            "bf16",
                            "int8",
                            "int4",
                            "int8:128",
                            "int8:128:sr",
                            "int8:sr:128",
                            "int4:64:sr",
                            "int4:2",
                            "int4:65536",
                            "topk:0.01",
                            "topk:0.01:ef",
                            "topk:1",
                            "topk:1e-3",
                            "shuffle",
                            "zstd",
                            "zstd:1",
                            "zstd:3",
                            "zstd:-7",
                            "zstd:22",
                            "int8+zstd",
                            "bf16+shuffle+zstd:3",
                            "topk:0.01+zstd",
                            "topk:0.01:ef+zstd:3",
                            "shuffle+zstd",
                            "fp16+shuffle",
                            "fp16+zstd:19",
                            "int4:sr+shuffle+zstd:19"}) {
    absl::StatusOr<ChainSpec> parsed = ParseChainSpec(chain);
    EXPECT_TRUE(parsed.ok()) << chain << ": " << parsed.status();
  }
}

// What `strait config check` prints after file:line:column and the key; the messages in
// tests/data/bad_specs depend on these.
TEST(ChainSpecTest, RejectsWithAReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty codec chain; expected stages joined by '+' from: none, fp16"},
      {"int8++zstd", "empty stage in codec chain 'int8++zstd'"},
      {"+", "empty stage"},
      {"int8+", "empty stage"},
      {"+int8", "empty stage"},
      {":", "empty stage"},
      {"gzip", "unknown codec stage 'gzip'; expected one of none, fp16"},
      {"INT8", "unknown codec stage 'INT8'"},
      {"int8 ", "unknown codec stage 'int8 '"},
      {"none+zstd", "'none' must be the only stage of a codec chain"},
      {"zstd+none", "'none' must be the only stage"},
      {"zstd+int8", "stage 'int8' cannot follow 'zstd' in codec chain 'zstd+int8'; order is"},
      {"int8+bf16", "cannot follow 'int8'"},
      {"int8+fp16", "cannot follow 'int8'"},
      {"zstd+shuffle", "cannot follow 'zstd'"},
      {"shuffle+shuffle", "cannot follow 'shuffle'"},
      {"zstd+zstd", "cannot follow 'zstd'"},
      {"topk", "codec stage 'topk': needs the kept fraction R in (0, 1]"},
      {"topk:0", "codec stage 'topk:...': needs the kept fraction"},
      {"topk:1.5", "needs the kept fraction"},
      {"topk:-0.1", "needs the kept fraction"},
      {"topk:nan", "needs the kept fraction"},
      {"topk:ef", "needs the kept fraction"},
      {"topk:0.1:xx", "unexpected parameter 'xx'; the only option is 'ef'"},
      {"topk:0.1:x", "the only option is 'ef'"},
      {"topk:0.1:ef:ef", "the only option is 'ef'"},
      {"int8:3",
       "codec stage 'int8:...': block size must be an even number in [2, 65536], found 3"},
      {"int8:0", "block size must be an even number"},
      {"int8:-2", "block size must be an even number"},
      {"int8:65538", "block size must be an even number"},
      {"int8:128:256", "unexpected parameter '256'"},
      {"int8:fast", "unexpected parameter 'fast'; expected a block size and/or 'sr'"},
      {"int8:x", "unexpected parameter 'x'"},
      {"int8:", "unexpected parameter ''"},
      {"int8:sr:sr", "unexpected parameter 'sr'"},
      {"zstd:0", "codec stage 'zstd:...': level must be an integer in [-7, 22] other than 0"},
      {"zstd:23", "level must be"},
      {"zstd:-8", "level must be"},
      {"zstd:1:2", "level must be"},
      {"zstd:x", "level must be"},
      {"bf16:1", "codec stage 'bf16:...': takes no parameters"},
      {"fp16:1", "takes no parameters"},
      {"none:1", "takes no parameters"},
      {"shuffle:2", "takes no parameters"},
  };
  for (const auto& [chain, reason] : cases) {
    absl::StatusOr<ChainSpec> parsed = ParseChainSpec(chain);
    ASSERT_FALSE(parsed.ok()) << "'" << chain << "' was accepted";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << chain;
    EXPECT_THAT(std::string(parsed.status().message()), ::testing::HasSubstr(reason)) << chain;
  }
}

// Every chain of up to three stages drawn from stage spellings good and bad: accepted exactly when
// each stage is valid alone and the order rule holds, and then the canonical text parses back.
TEST(ChainSpecTest, CombinationsFollowTheOrderRule) {
  const std::vector<std::string> stages = {
      "none",      "fp16",     "bf16",        "int8",      "int8:64",  "int8:sr",  "int8:7",
      "int4:4:sr", "topk:0.5", "topk:0.5:ef", "topk:2",    "shuffle",  "zstd",     "zstd:5",
      "zstd:0",    "zstd: 3",  "int8: 64",    "topk: 0.5", "topk:1e0", "int8:+64", "",
      "x"};
  // -1: invalid alone; else 0 value stage, 1 shuffle, 2 zstd, 3 none.
  auto rank = [](const std::string& stage) {
    absl::StatusOr<ChainSpec> alone = ParseChainSpec(stage);
    if (!alone.ok()) return -1;
    StageKind kind = alone->stages[0].kind;
    if (kind == StageKind::kNone) return 3;
    return IsValueStage(kind) ? 0 : (kind == StageKind::kShuffle ? 1 : 2);
  };
  auto expect = [&](const std::vector<std::string>& chain) {
    const std::string text = absl::StrJoin(chain, "+");
    bool valid = true;
    int previous = -1;
    for (const std::string& stage : chain) {
      const int r = rank(stage);
      if (r < 0 || (r == 3 && chain.size() > 1) || r <= previous) valid = false;
      previous = r;
    }
    absl::StatusOr<ChainSpec> parsed = ParseChainSpec(text);
    EXPECT_EQ(parsed.ok(), valid) << "'" << text << "': " << parsed.status();
    if (parsed.ok()) {
      absl::StatusOr<ChainSpec> again = ParseChainSpec(parsed->ToString());
      ASSERT_TRUE(again.ok()) << parsed->ToString();
      EXPECT_EQ(*again, *parsed) << text;
      EXPECT_TRUE(ValidateChainSpec(*parsed).ok()) << text;
    }
  };
  int checked = 0;
  for (const std::string& a : stages) {
    expect({a});
    for (const std::string& b : stages) {
      expect({a, b});
      for (const std::string& c : stages) {
        expect({a, b, c});
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 22 * 22 * 22);
}

TEST(ChainSpecTest, LosslessOnlyWithoutValueStages) {
  EXPECT_TRUE(ParseChainSpec("none")->IsLossless());
  EXPECT_TRUE(ParseChainSpec("shuffle")->IsLossless());
  EXPECT_TRUE(ParseChainSpec("shuffle+zstd:3")->IsLossless());
  EXPECT_FALSE(ParseChainSpec("bf16+zstd")->IsLossless());
  EXPECT_FALSE(ParseChainSpec("int4")->IsLossless());
  EXPECT_FALSE(ParseChainSpec("topk:0.1")->IsLossless());
}

TEST(ChainSpecTest, ParsesStagesAndParameters) {
  absl::StatusOr<ChainSpec> chain = ParseChainSpec("int8:128:sr+shuffle+zstd:3");
  ASSERT_TRUE(chain.ok()) << chain.status();
  ASSERT_EQ(chain->stages.size(), 3u);
  EXPECT_EQ(chain->stages[0].kind, StageKind::kInt8);
  EXPECT_EQ(chain->stages[0].block_size, 128);
  EXPECT_TRUE(chain->stages[0].stochastic);
  EXPECT_EQ(chain->stages[1].kind, StageKind::kShuffle);
  EXPECT_EQ(chain->stages[1].width, 1);
  EXPECT_EQ(chain->stages[2].level, 3);
  EXPECT_FALSE(chain->IsLossless());

  chain = ParseChainSpec("topk:0.01:ef+zstd");
  ASSERT_TRUE(chain.ok());
  EXPECT_DOUBLE_EQ(chain->stages[0].fraction, 0.01);
  EXPECT_TRUE(chain->stages[0].error_feedback);
  EXPECT_TRUE(chain->NeedsResidual());
  EXPECT_EQ(chain->stages[1].level, kDefaultZstdLevel);
}

TEST(ChainSpecTest, ShuffleWidthFollowsThePreviousStage) {
  EXPECT_EQ(ParseChainSpec("shuffle+zstd")->stages[0].width, 4);
  EXPECT_EQ(ParseChainSpec("bf16+shuffle")->stages[1].width, 2);
  EXPECT_EQ(ParseChainSpec("fp16+shuffle")->stages[1].width, 2);
  EXPECT_EQ(ParseChainSpec("int4+shuffle")->stages[1].width, 1);
}

TEST(ChainSpecTest, CanonicalTextRoundTrips) {
  for (const char* text : {"none", "fp16", "bf16+shuffle+zstd:3", "int8", "int4:64:sr+zstd",
                           "topk:0.01:ef+zstd:-3", "topk:0.3333333333333333", "shuffle"}) {
    absl::StatusOr<ChainSpec> chain = ParseChainSpec(text);
    ASSERT_TRUE(chain.ok()) << text << ": " << chain.status();
    absl::StatusOr<ChainSpec> again = ParseChainSpec(chain->ToString());
    ASSERT_TRUE(again.ok()) << chain->ToString();
    EXPECT_EQ(*again, *chain) << text;
  }
  EXPECT_EQ(ParseChainSpec("int8+zstd")->ToString(), "int8:256+zstd:1");
  EXPECT_TRUE(ParseChainSpec("none")->IsLossless());
  EXPECT_TRUE(ParseChainSpec("shuffle+zstd")->IsLossless());
}

TEST(ChainSpecTest, ErrorsNameTheStage) {
  EXPECT_THAT(std::string(ParseChainSpec("int9").status().message()),
              ::testing::HasSubstr("unknown codec stage 'int9'"));
  EXPECT_THAT(std::string(ParseChainSpec("zstd+int8").status().message()),
              ::testing::HasSubstr("cannot follow"));
  EXPECT_THAT(std::string(ParseChainSpec("int8:3").status().message()),
              ::testing::HasSubstr("block size"));
  EXPECT_FALSE(ParseChainSpec("").ok());
}

TEST(ChainSpecTest, ValidateRejectsOutOfRangeTypedChains) {
  ChainSpec chain = *ParseChainSpec("int8+shuffle");
  EXPECT_TRUE(ValidateChainSpec(chain).ok());
  chain.stages[1].width = 4;  // shuffle after int8 has width 1
  EXPECT_FALSE(ValidateChainSpec(chain).ok());
  chain = *ParseChainSpec("zstd");
  chain.stages[0].level = 0;
  EXPECT_FALSE(ValidateChainSpec(chain).ok());
  // A typed chain has no text of its own: the message shows the canonical one.
  chain = *ParseChainSpec("zstd");
  chain.stages.push_back(ParseChainSpec("int8")->stages[0]);
  EXPECT_THAT(std::string(ValidateChainSpec(chain).message()),
              ::testing::HasSubstr("stage 'int8' cannot follow 'zstd' in codec chain "
                                   "'zstd:1+int8:256'"));
}

// proj:K[:SEED] comes first, then fp16/bf16 or a quantizer with block K, or nothing (fp32
// coefficients), then shuffle and zstd as in any chain.
TEST(ChainSpecTest, AcceptsProjectChains) {
  for (const char* chain :
       {"proj:112", "proj:1", "proj:65536", "proj:112:7", "proj:112:0",
        "proj:112:18446744073709551615", "proj:112+int4:112", "proj:112+int4:112:sr+zstd",
        "proj:112+int4:sr:112", "proj:112+int8:112+shuffle+zstd:3", "proj:112+bf16+shuffle",
        "proj:111+fp16", "proj:112+zstd", "proj:112+shuffle+zstd", "proj:2:9+int8:2"}) {
    absl::StatusOr<ChainSpec> parsed = ParseChainSpec(chain);
    EXPECT_TRUE(parsed.ok()) << chain << ": " << parsed.status();
    if (!parsed.ok()) continue;
    EXPECT_TRUE(ValidateChainSpec(*parsed).ok()) << chain;
    EXPECT_FALSE(parsed->IsLossless()) << chain;
    ASSERT_NE(FindProject(*parsed), nullptr) << chain;
    absl::StatusOr<ChainSpec> again = ParseChainSpec(parsed->ToString());
    ASSERT_TRUE(again.ok()) << parsed->ToString() << ": " << again.status();
    EXPECT_EQ(*again, *parsed) << chain;
  }
}

TEST(ChainSpecTest, RejectsProjectChainsWithAReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"proj", "codec stage 'proj': needs the number of kept directions K in [1, 65536]"},
      {"proj:0", "codec stage 'proj:...': needs the number of kept directions K"},
      {"proj:65537", "needs the number of kept directions K"},
      {"proj:-4", "needs the number of kept directions K"},
      {"proj:x", "needs the number of kept directions K"},
      {"proj:112:7:8", "needs the number of kept directions K"},
      {"proj:112:-1", "seed must be an integer in [0, 2^64), found '-1'"},
      {"proj:112:18446744073709551616", "seed must be an integer"},
      {"proj:112:0x10", "seed must be an integer"},
      {"int4:112+proj:112",
       "'proj' must be the first stage of a codec chain, found it after 'int4' in "
       "'int4:112+proj:112'"},
      {"zstd+proj:4", "'proj' must be the first stage"},
      {"proj:4+proj:4", "'proj' must be the first stage"},
      {"proj:4+none", "'none' must be the only stage"},
      {"proj:112+int4:256", "proj:112 followed by int4:256: use int4:112"},
      {"proj:112+int4", "proj:112 followed by int4:256: use int4:112"},
      {"proj:112+int8:128:sr", "proj:112 followed by int8:128:sr: use int8:112:sr"},
      {"proj:111+int4:112",
       "proj:111 followed by int4:112: int8 and int4 after proj need an "
       "even K"},
      {"proj:112+topk:0.1",
       "proj:112 followed by topk:0.1: after proj the coefficients are coded "
       "by fp16, bf16, int8:K or int4:K"},
      {"proj:112+int4:112+bf16", "stage 'bf16' cannot follow 'int4'"},
  };
  for (const auto& [chain, reason] : cases) {
    absl::StatusOr<ChainSpec> parsed = ParseChainSpec(chain);
    ASSERT_FALSE(parsed.ok()) << "'" << chain << "' was accepted";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << chain;
    EXPECT_THAT(std::string(parsed.status().message()), ::testing::HasSubstr(reason)) << chain;
  }
}

TEST(ChainSpecTest, KltStandsAloneWithAStep) {
  absl::StatusOr<ChainSpec> chain = ParseChainSpec("klt:0.1");
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ(chain->stages[0].kind, StageKind::kKlt);
  EXPECT_EQ(static_cast<int>(StageKind::kKlt), 9);  // a wire value
  EXPECT_EQ(chain->stages[0].step, 0.1);
  EXPECT_FALSE(chain->stages[0].stochastic);
  EXPECT_FALSE(chain->IsLossless());
  EXPECT_EQ(DeviceValueStage(*chain), nullptr);  // only the host codec runs it
  EXPECT_EQ(chain->ToString(), "klt:0.1");
  EXPECT_EQ(ParseChainSpec("klt:1:sr")->ToString(), "klt:1:sr");
  EXPECT_TRUE(ParseChainSpec("klt:1:sr")->stages[0].stochastic);
  EXPECT_FALSE(chain->stages[0].fisher);
  EXPECT_TRUE(ParseChainSpec("klt:0.1:fisher")->stages[0].fisher);
  EXPECT_EQ(ParseChainSpec("klt:0.1:fisher")->ToString(), "klt:0.1:fisher");
  EXPECT_EQ(ParseChainSpec("klt:1:sr:fisher")->ToString(), "klt:1:sr:fisher");
  const StageSpec dither = ParseChainSpec("klt:0.5:dither")->stages[0];
  EXPECT_TRUE(dither.stochastic && dither.dithered);  // stochastic rounding's symbols
  EXPECT_FALSE(ParseChainSpec("klt:1:sr")->stages[0].dithered);
  EXPECT_EQ(ParseChainSpec("klt:0.5:dither")->ToString(), "klt:0.5:dither");
  EXPECT_EQ(ParseChainSpec("klt:0.5:dither:fisher")->ToString(), "klt:0.5:dither:fisher");
  ChainSpec forged = *ParseChainSpec("klt:0.5");
  forged.stages[0].dithered = true;  // dither without stochastic rounding's symbols
  EXPECT_FALSE(ValidateChainSpec(forged).ok());
  EXPECT_TRUE(ParseChainSpec("klt:0.001").ok());
  EXPECT_TRUE(ParseChainSpec("klt:16").ok());
  const std::pair<const char*, const char*> bad[] = {
      {"klt", "codec stage 'klt': needs the step STEP in [0.001, 16]"},
      {"klt:0", "needs the step STEP"},
      {"klt:17", "needs the step STEP"},
      {"klt:x", "needs the step STEP"},
      {"klt:0.1:ef",
       "unexpected parameter 'ef'; the options are 'sr' (stochastic rounding) or 'dither' "
       "(stochastic rounding whose noise the receiver subtracts), then 'fisher'"},
      {"klt:0.1:sr:sr", "unexpected parameter 'sr'"},
      {"klt:0.1:sr:dither", "unexpected parameter 'dither'"},
      {"klt:0.1:fisher:dither", "unexpected parameter 'dither'"},
      {"klt:0.1:fisher:sr", "unexpected parameter 'sr'"},
      {"klt:0.1:fisher:fisher", "unexpected parameter 'fisher'"},
      {"klt:0.1:sr:fisher:x", "needs the step STEP"},
      {"klt:0.1+zstd", "'klt' must be the only stage of a codec chain"},
      {"int8+klt:0.1", "'klt' must be the only stage of a codec chain"},
      {"proj:8+klt:0.1", "'klt' must be the only stage of a codec chain"},
  };
  for (const auto& [text, message] : bad) {
    absl::StatusOr<ChainSpec> parsed = ParseChainSpec(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_NE(parsed.status().message().find(message), std::string::npos)
        << text << ": " << parsed.status();
  }
}

TEST(ChainSpecTest, ProjectParametersAndCanonicalText) {
  absl::StatusOr<ChainSpec> chain = ParseChainSpec("proj:112+int4:112+zstd");
  ASSERT_TRUE(chain.ok()) << chain.status();
  ASSERT_EQ(chain->stages.size(), 3u);
  EXPECT_EQ(chain->stages[0].kind, StageKind::kProject);
  EXPECT_EQ(chain->stages[0].subspace, 112);
  EXPECT_EQ(chain->stages[0].basis_seed, kDefaultBasisSeed);
  EXPECT_EQ(chain->ToString(), "proj:112:6840227782638526189+int4:112+zstd:1");
  EXPECT_EQ(ParseChainSpec("proj:8:42")->stages[0].basis_seed, 42u);
  EXPECT_FALSE(ParseChainSpec("proj:8:42") == ParseChainSpec("proj:8:43"));
  EXPECT_EQ(ParseChainSpec("proj:8+shuffle")->stages[1].width, 4);  // fp32 coefficients
  EXPECT_EQ(ParseChainSpec("proj:8+bf16+shuffle")->stages[2].width, 2);
  EXPECT_EQ(ParseChainSpec("proj:8+int8:8+shuffle")->stages[2].width, 1);
  EXPECT_EQ(static_cast<int>(StageKind::kProject), 8);  // a wire value
  EXPECT_EQ(FindProject(*ParseChainSpec("int8+zstd")), nullptr);
}

TEST(ChainSpecTest, ValidateRejectsBadTypedProjectChains) {
  ChainSpec chain = *ParseChainSpec("proj:8+int4:8");
  EXPECT_TRUE(ValidateChainSpec(chain).ok());
  chain.stages[1].block_size = 16;
  EXPECT_THAT(std::string(ValidateChainSpec(chain).message()),
              ::testing::HasSubstr("proj:8 followed by int4:16: use int4:8"));
  chain = *ParseChainSpec("proj:8");
  chain.stages[0].subspace = 0;
  EXPECT_FALSE(ValidateChainSpec(chain).ok());
  chain.stages[0].subspace = kMaxSubspace + 1;
  EXPECT_FALSE(ValidateChainSpec(chain).ok());
  chain = *ParseChainSpec("int8");
  chain.stages.push_back(ParseChainSpec("proj:8")->stages[0]);
  EXPECT_THAT(std::string(ValidateChainSpec(chain).message()),
              ::testing::HasSubstr("'proj' must be the first stage"));
}

}  // namespace
}  // namespace strait::compression
