#include "core/codec_chain_syntax.h"

#include <gtest/gtest.h>

namespace strait {
namespace {

TEST(CodecChainSyntaxTest, AcceptsDocumentedChains) {
  for (const char* chain : {"none",
                            "fp16",
                            "bf16",
                            "int8",
                            "int4",
                            "int8:128",
                            "int4:64:sr",
                            "int8:sr:512",
                            "topk:0.01",
                            "topk:1",
                            "topk:0.5:ef",
                            "shuffle",
                            "zstd",
                            "zstd:3",
                            "zstd:-5",
                            "int8+zstd",
                            "bf16+shuffle+zstd:3",
                            "topk:0.01+zstd",
                            "shuffle+zstd",
                            "fp16+zstd:19"}) {
    EXPECT_TRUE(ParseCodecChainSyntax(chain).ok()) << chain;
  }
}

TEST(CodecChainSyntaxTest, SplitsStagesAndParameters) {
  auto stages = ParseCodecChainSyntax("int8:128:sr+shuffle+zstd:3");
  ASSERT_TRUE(stages.ok());
  ASSERT_EQ(stages->size(), 3u);
  EXPECT_EQ((*stages)[0].name, "int8");
  EXPECT_EQ((*stages)[0].params, (std::vector<std::string>{"128", "sr"}));
  EXPECT_EQ((*stages)[1].name, "shuffle");
  EXPECT_TRUE((*stages)[1].params.empty());
  EXPECT_EQ((*stages)[2].params, (std::vector<std::string>{"3"}));
}

TEST(CodecChainSyntaxTest, RejectsWithAReason) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "empty codec chain"},
      {"int8++zstd", "empty stage"},
      {"gzip", "unknown codec stage 'gzip'"},
      {"none+zstd", "'none' must be the only stage"},
      {"zstd+int8", "cannot follow 'zstd'"},
      {"int8+bf16", "cannot follow 'int8'"},
      {"zstd+shuffle", "cannot follow 'zstd'"},
      {"zstd+zstd", "cannot follow 'zstd'"},
      {"topk", "needs the kept fraction"},
      {"topk:0", "needs the kept fraction"},
      {"topk:1.5", "needs the kept fraction"},
      {"topk:0.1:xx", "the only option is 'ef'"},
      {"int8:3", "block size must be an even number"},
      {"int8:fast", "unexpected parameter 'fast'"},
      {"int8:sr:sr", "unexpected parameter 'sr'"},
      {"zstd:0", "level must be"},
      {"zstd:23", "level must be"},
      {"zstd:1:2", "level must be"},
      {"bf16:1", "takes no parameters"},
      {"shuffle:2", "takes no parameters"},
  };
  for (const auto& [chain, reason] : cases) {
    auto stages = ParseCodecChainSyntax(chain);
    ASSERT_FALSE(stages.ok()) << chain;
    EXPECT_NE(stages.status().message().find(reason), absl::string_view::npos)
        << chain << ": " << stages.status().message();
  }
}

TEST(CodecChainSyntaxTest, LosslessOnlyWithoutValueStages) {
  EXPECT_TRUE(IsLosslessChain(*ParseCodecChainSyntax("none")));
  EXPECT_TRUE(IsLosslessChain(*ParseCodecChainSyntax("shuffle+zstd:3")));
  EXPECT_FALSE(IsLosslessChain(*ParseCodecChainSyntax("bf16+zstd")));
  EXPECT_FALSE(IsLosslessChain(*ParseCodecChainSyntax("topk:0.1")));
}

}  // namespace
}  // namespace strait
