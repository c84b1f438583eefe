#include "compression/chain_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strait::compression {
namespace {

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
}

}  // namespace
}  // namespace strait::compression
