// `strait export` (tools/model_export.h): a gpt's parameters land under GPT-2's names bit for bit,
// Conv1D weights transposed, and config.json says GPT-2's sizes.
#include "tools/model_export.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <numeric>

#include "core/model_layout.h"

namespace strait::tools {
namespace {

TEST(ModelExportTest, AGptBecomesGpt2sTensorsBitForBit) {
  ModelSpec model;
  model.family = ModelFamily::kGpt;
  model.gpt = GptSpec{.vocab = 16, .context = 8, .dim = 8, .depth = 1, .heads = 2, .mlp_dim = 12};
  int64_t count = 0;
  for (const LayerLayout& layer : BuildModelLayout(model)) count += layer.param_count;
  std::vector<float> params(static_cast<size_t>(count));
  std::iota(params.begin(), params.end(), 0.5f);  // Every value tells where it came from.
  absl::StatusOr<ExportedModel> exported = ExportModel(model, params, site::SafetensorsDtype::kF32);
  ASSERT_TRUE(exported.ok()) << exported.status();
  absl::StatusOr<std::vector<site::NamedTensor>> read =
      site::DecodeSafetensors(exported->safetensors);
  ASSERT_TRUE(read.ok()) << read.status();
  auto tensor = [&](const std::string& name) {
    for (const site::NamedTensor& t : *read) {
      if (t.name == name) return t;
    }
    ADD_FAILURE() << "no " << name;
    return site::NamedTensor{};
  };
  // wte is the first parameter: values 0.5, 1.5, ... in order.
  const site::NamedTensor wte = tensor("wte.weight");
  EXPECT_EQ(wte.values.front(), 0.5f);
  EXPECT_EQ(wte.values[17], 17.5f);
  // c_attn.weight[i][j] is Strait's qkv.weight[j][i] (its [3D, D] stored row by row).
  const int64_t qkv = [&] {
    int64_t offset = 0;
    for (const LayerLayout& layer : BuildModelLayout(model)) {
      for (const ParamLayout& p : layer.params) {
        if (layer.index == 1 && p.name == "attn.qkv.weight") return offset;
        offset += p.numel;
      }
    }
    return int64_t{-1};
  }();
  ASSERT_GE(qkv, 0);
  const site::NamedTensor c_attn = tensor("h.0.attn.c_attn.weight");
  ASSERT_EQ(c_attn.shape, (std::vector<int64_t>{8, 24}));
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 24; ++j) {
      EXPECT_EQ(c_attn.values[i * 24 + j], params[qkv + j * 8 + i]) << i << "," << j;
    }
  }
  const nlohmann::json config = nlohmann::json::parse(exported->config_json);
  EXPECT_EQ(config["model_type"], "gpt2");
  EXPECT_EQ(config["n_embd"], 8);
  EXPECT_EQ(config["n_inner"], 12);
  EXPECT_EQ(config["n_positions"], 8);
}

}  // namespace
}  // namespace strait::tools
