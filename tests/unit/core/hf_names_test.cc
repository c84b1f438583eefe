// GPT-2's names and shapes of a gpt's parameters (core/hf_names.h): every parameter once, in
// Strait's order, Conv1D weights transposed.
#include "core/hf_names.h"

#include <gtest/gtest.h>

#include <set>

#include "core/model_layout.h"

namespace strait {
namespace {

TEST(HfNamesTest, AGptHasGpt2sNamesAndShapes) {
  ModelSpec model;
  model.family = ModelFamily::kGpt;
  model.gpt =
      GptSpec{.vocab = 256, .context = 64, .dim = 32, .depth = 2, .heads = 4, .mlp_dim = 128};
  absl::StatusOr<std::vector<HfTensor>> names = HfNames(model);
  ASSERT_TRUE(names.ok()) << names.status();
  int64_t params = 0;
  std::set<std::string> seen;
  for (const HfTensor& t : *names) {
    EXPECT_TRUE(seen.insert(t.name).second) << t.name;
    params += NumElements(t.shape);
  }
  int64_t strait = 0;
  for (const LayerLayout& layer : BuildModelLayout(model)) strait += layer.param_count;
  EXPECT_EQ(params, strait);
  auto find = [&](const std::string& name) {
    for (const HfTensor& t : *names) {
      if (t.name == name) return t;
    }
    ADD_FAILURE() << "no " << name;
    return HfTensor{};
  };
  EXPECT_EQ(find("wte.weight").shape, (std::vector<int64_t>{256, 32}));
  EXPECT_EQ(find("wpe.weight").shape, (std::vector<int64_t>{64, 32}));
  const HfTensor qkv = find("h.1.attn.c_attn.weight");
  EXPECT_EQ(qkv.shape, (std::vector<int64_t>{32, 96}));  // [in, out]
  EXPECT_TRUE(qkv.transposed);
  EXPECT_EQ(qkv.layer, 2);
  EXPECT_EQ(find("h.0.mlp.c_fc.weight").shape, (std::vector<int64_t>{32, 128}));
  EXPECT_EQ(find("h.0.mlp.c_proj.weight").shape, (std::vector<int64_t>{128, 32}));
  EXPECT_FALSE(find("h.0.ln_1.weight").transposed);
  EXPECT_EQ(find("ln_f.bias").layer, 3);
  EXPECT_EQ(find("lm_head.weight").shape, (std::vector<int64_t>{256, 32}));
  model.family = ModelFamily::kMlp;
  EXPECT_EQ(HfNames(model).status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace strait
