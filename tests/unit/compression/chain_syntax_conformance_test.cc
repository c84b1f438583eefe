// core checks chains when a job spec is loaded; compression parses them when it builds codecs. Both
// must accept exactly the same strings.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compression/chain_spec.h"
#include "core/codec_chain_syntax.h"

namespace strait {
namespace {

void ExpectSameVerdict(const std::string& chain) {
  bool core_ok = ParseCodecChainSyntax(chain).ok();
  absl::StatusOr<compression::ChainSpec> parsed = compression::ParseChainSpec(chain);
  EXPECT_EQ(core_ok, parsed.ok()) << "'" << chain << "': " << parsed.status();
  if (parsed.ok()) {
    EXPECT_EQ(IsLosslessChain(*ParseCodecChainSyntax(chain)), parsed->IsLossless()) << chain;
  }
}

TEST(ChainSyntaxConformanceTest, AcceptedChains) {
  for (const char* chain : {"none",
                            "fp16",
                            "bf16",
                            "int8",
                            "int4",
                            "int8:128:sr",
                            "int8:sr:128",
                            "int4:2",
                            "int4:65536",
                            "topk:0.01",
                            "topk:0.01:ef",
                            "topk:1",
                            "topk:1e-3",
                            "shuffle",
                            "zstd",
                            "zstd:1",
                            "zstd:-7",
                            "zstd:22",
                            "int8+zstd",
                            "bf16+shuffle+zstd:3",
                            "topk:0.01+zstd",
                            "topk:0.01:ef+zstd:3",
                            "shuffle+zstd",
                            "fp16+shuffle",
                            "int4:sr+shuffle+zstd:19"}) {
    ASSERT_TRUE(ParseCodecChainSyntax(chain).ok()) << chain;
    ExpectSameVerdict(chain);
  }
}

TEST(ChainSyntaxConformanceTest, RejectedChains) {
  for (const char* chain : {"",
                            "+",
                            "int8+",
                            "+int8",
                            "int8++zstd",
                            "none+zstd",
                            "zstd+none",
                            "int8+fp16",
                            "zstd+shuffle",
                            "shuffle+shuffle",
                            "zstd+zstd",
                            "int8:3",
                            "int8:0",
                            "int8:65538",
                            "int8:-2",
                            "int8:sr:sr",
                            "int8:128:256",
                            "int8:x",
                            "topk",
                            "topk:0",
                            "topk:1.5",
                            "topk:-0.1",
                            "topk:nan",
                            "topk:0.1:ef:ef",
                            "topk:0.1:x",
                            "topk:ef",
                            "zstd:0",
                            "zstd:23",
                            "zstd:-8",
                            "zstd:1:2",
                            "zstd:x",
                            "fp16:1",
                            "none:1",
                            "shuffle:2",
                            "INT8",
                            "int8 ",
                            "gzip",
                            ":",
                            "int8:"}) {
    ASSERT_FALSE(ParseCodecChainSyntax(chain).ok()) << chain;
    ExpectSameVerdict(chain);
  }
}

// Every chain of up to three stages drawn from a list of stage spellings, good and bad.
TEST(ChainSyntaxConformanceTest, AllCombinationsAgree) {
  const std::vector<std::string> stages = {
      "none",      "fp16",     "bf16",        "int8",      "int8:64",  "int8:sr",  "int8:7",
      "int4:4:sr", "topk:0.5", "topk:0.5:ef", "topk:2",    "shuffle",  "zstd",     "zstd:5",
      "zstd:0",    "zstd: 3",  "int8: 64",    "topk: 0.5", "topk:1e0", "int8:+64", "",
      "x"};
  int checked = 0;
  for (const std::string& a : stages) {
    ExpectSameVerdict(a);
    for (const std::string& b : stages) {
      ExpectSameVerdict(a + "+" + b);
      for (const std::string& c : stages) {
        ExpectSameVerdict(a + "+" + b + "+" + c);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 22 * 22 * 22);
}

}  // namespace
}  // namespace strait
