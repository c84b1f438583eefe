// GPT-2's names and shapes of a gpt's parameters (core/hf_names.h): every parameter once, in
// Strait's order, Conv1D weights transposed.
#include "core/hf_names.h"

#include <gtest/gtest.h>

#include <map>
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

TEST(HfNamesTest, ALlamaHasLlamaForCausalLMsNamesAndRotaryRows) {
  ModelSpec model;
  model.family = ModelFamily::kLlama;
  model.gpt.vocab = 100;
  model.gpt.context = 16;
  model.gpt.dim = 32;
  model.gpt.depth = 2;
  model.gpt.heads = 4;
  model.gpt.kv_heads = 2;
  model.gpt.mlp_dim = 48;
  absl::StatusOr<std::vector<HfTensor>> names = HfNames(model);
  ASSERT_TRUE(names.ok()) << names.status();
  std::map<std::string, HfTensor> by_name;
  for (const HfTensor& t : *names) by_name[t.name] = t;
  EXPECT_EQ(by_name.size(), names->size());
  EXPECT_EQ(names->size(), 1 + 2 * 9 + 2u);
  EXPECT_EQ(by_name["model.embed_tokens.weight"].shape, (std::vector<int64_t>{100, 32}));
  EXPECT_EQ(by_name["model.layers.1.self_attn.q_proj.weight"].shape,
            (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(by_name["model.layers.1.self_attn.k_proj.weight"].shape,
            (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(by_name["model.layers.1.self_attn.q_proj.weight"].rotary_heads, 4);
  EXPECT_EQ(by_name["model.layers.1.self_attn.k_proj.weight"].rotary_heads, 2);
  EXPECT_EQ(by_name["model.layers.1.self_attn.v_proj.weight"].rotary_heads, 0);
  EXPECT_EQ(by_name["model.layers.0.mlp.down_proj.weight"].shape, (std::vector<int64_t>{32, 48}));
  EXPECT_EQ(by_name["model.norm.weight"].layer, 3);
  EXPECT_EQ(by_name["lm_head.weight"].param, 1);
  // Pairs (2i, 2i+1) of a head of 8 rows go to rows i and i + 4 of Hugging Face's head.
  EXPECT_EQ(HfRotaryRow(0, 8), 0);
  EXPECT_EQ(HfRotaryRow(1, 8), 4);
  EXPECT_EQ(HfRotaryRow(2, 8), 1);
  EXPECT_EQ(HfRotaryRow(7, 8), 7);
  EXPECT_EQ(HfRotaryRow(8 + 3, 8), 8 + 5);
  // The layout round trip restores every value.
  const HfTensor& q = by_name["model.layers.0.self_attn.q_proj.weight"];
  std::vector<float> strait(32 * 32), hf(strait.size()), back(strait.size());
  for (size_t i = 0; i < strait.size(); ++i) strait[i] = static_cast<float>(i);
  ToHfLayout(q, strait.data(), hf.data());
  EXPECT_EQ(hf[4 * 32], strait[1 * 32]);  // HF row 4 is Strait's row 1
  FromHfLayout(q, hf.data(), back.data());
  EXPECT_EQ(back, strait);
}

}  // namespace
}  // namespace strait
