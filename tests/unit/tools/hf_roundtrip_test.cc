// `strait export` checked by an independent reader and read back (issue 47): a gpt and a llama
// (grouped-query attention, tied and untied heads) with random parameters are exported; the
// numpy-only tests/tools/hf_reference.py recomputes Hugging Face's forward (GPT-2's, LLaMA's with
// its rotary convention) from the files and must match Strait's logits within 1e-4 relative;
// `model.init_from` reads the files back to the exported parameters bit for bit (bf16 files: to
// the parameters rounded to bf16), also a stage's own layers only; bad files are refused with
// errors that name the file and the tensor.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/model_layout.h"
#include "site/backend/backend_factory.h"
#include "site/backend/counter_rng.h"
#include "site/backend/dtype.h"
#include "site/nn/model_import.h"
#include "site/nn/stage.h"
#include "site/pipeline/weight_history.h"
#include "tools/model_export.h"

namespace strait::tools {
namespace {

namespace fs = std::filesystem;

ModelSpec Tiny(ModelFamily family, int kv_heads, bool tied) {
  ModelSpec m;
  m.family = family;
  m.gpt.vocab = 19;
  m.gpt.context = 12;
  m.gpt.dim = 32;
  m.gpt.depth = 2;
  m.gpt.heads = 4;
  m.gpt.kv_heads = kv_heads;
  m.gpt.mlp_dim = 40;
  m.gpt.rope_theta = 500.0;
  m.gpt.norm_eps = 1e-5f;
  m.gpt.tie_embeddings = tied;
  return m;
}

// Random parameters in Strait's layout (gammas near 1, the rest small), the tied copy equal to
// the embedding.
std::vector<float> RandomParams(const ModelSpec& model) {
  std::vector<float> params;
  for (const LayerLayout& layer : BuildModelLayout(model)) {
    for (const ParamLayout& p : layer.params) {
      const bool gamma = p.name.find("gamma") != std::string::npos;
      for (int64_t i = 0; i < p.numel; ++i) {
        const float u = 2.0f * site::CounterUniform(params.size(), 7) - 1.0f;
        params.push_back(gamma ? 1.0f + 0.3f * u : 0.2f * u);
      }
    }
  }
  if (model.gpt.tie_embeddings) {
    const int64_t table = int64_t{model.gpt.vocab} * model.gpt.dim;
    std::copy_n(params.begin(), table,
                params.end() - table - (model.family == ModelFamily::kGpt ? model.gpt.vocab : 0));
  }
  return params;
}

fs::path Export(const ModelSpec& model, const std::vector<float>& params,
                site::SafetensorsDtype dtype, const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / name;
  fs::create_directories(dir);
  absl::StatusOr<ExportedModel> exported = ExportModel(model, params, dtype);
  EXPECT_TRUE(exported.ok()) << exported.status();
  std::ofstream(dir / "model.safetensors", std::ios::binary) << exported->safetensors;
  std::ofstream(dir / "config.json") << exported->config_json;
  return dir;
}

// Strait's logits for token windows `tokens` ([n, context]) from model.init_from.
std::vector<float> StraitLogits(const ModelSpec& model, int n, const std::vector<float>& tokens) {
  auto backend = *site::CreateBackend(DeviceKind::kCpu, {1, 0});
  auto stage = site::Stage::Create(model, {0, model.NumLayers()}, n, backend.get());
  EXPECT_TRUE(stage.ok()) << stage.status();
  auto history = site::WeightHistory::Create(**stage, {});
  EXPECT_TRUE(history.ok()) << history.status();
  std::vector<const site::LayerParams*> weights;
  for (const site::LayerParams& v : **(*history)->Views(site::kNewestWeights, 0, "test")) {
    weights.push_back(&v);
  }
  std::vector<float> logits(static_cast<size_t>(n) * model.gpt.context * model.gpt.vocab);
  EXPECT_TRUE((*stage)->Forward(0, n, tokens.data(), logits.data(), weights).ok());
  return logits;
}

template <class T>
void WriteRaw(const fs::path& path, const std::vector<T>& v) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(v.data()),
             static_cast<std::streamsize>(v.size() * sizeof(T)));
}

// Exit status of the numpy reader on `dir`, Strait's logits of `tokens`.
int RunReader(const fs::path& dir, const ModelSpec& model, int n) {
  std::vector<float> tokens(static_cast<size_t>(n) * model.gpt.context);
  std::vector<int32_t> ids(tokens.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int32_t>((i * 7 + 3) % model.gpt.vocab);
    tokens[i] = static_cast<float>(ids[i]);
  }
  ModelSpec from = model;
  from.init_from = dir.string();
  WriteRaw(dir / "tokens.bin", ids);
  WriteRaw(dir / "logits.bin", StraitLogits(from, n, tokens));
  const std::string command = "/usr/bin/python3 " STRAIT_SOURCE_DIR "/tests/tools/hf_reference.py" +
                              std::string(" --model ") + dir.string() + " --tokens " +
                              (dir / "tokens.bin").string() + " --batch " + std::to_string(n) +
                              " --logits " + (dir / "logits.bin").string() + " --rtol 1e-4";
  return std::system(command.c_str());
}

struct Case {
  ModelFamily family;
  int kv_heads;
  bool tied;
};

class HfRoundTripTest : public ::testing::TestWithParam<Case> {};

TEST_P(HfRoundTripTest, AnIndependentReaderComputesStraitsLogits) {
  const ModelSpec model = Tiny(GetParam().family, GetParam().kv_heads, GetParam().tied);
  const fs::path dir = Export(model, RandomParams(model), site::SafetensorsDtype::kF32,
                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  EXPECT_EQ(RunReader(dir, model, 3), 0) << "tests/tools/hf_reference.py (needs Debian's "
                                            "python3-numpy, which scripts/setup installs)";
}

TEST_P(HfRoundTripTest, ImportReadsTheExportedParametersBitForBit) {
  const ModelSpec model = Tiny(GetParam().family, GetParam().kv_heads, GetParam().tied);
  const std::vector<float> params = RandomParams(model);
  for (auto dtype : {site::SafetensorsDtype::kF32, site::SafetensorsDtype::kBF16}) {
    const bool bf16 = dtype == site::SafetensorsDtype::kBF16;
    const fs::path dir = Export(model, params, dtype, bf16 ? "bf16" : "f32");
    absl::StatusOr<std::vector<float>> whole =
        site::ImportLayers(model, {0, model.NumLayers()}, dir);
    ASSERT_TRUE(whole.ok()) << whole.status();
    ASSERT_EQ(whole->size(), params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const float want = bf16 ? site::Bf16Value(site::Bf16Bits(params[i])) : params[i];
      ASSERT_EQ((*whole)[i], want) << (bf16 ? "bf16 " : "f32 ") << i;
    }
    // A stage of blocks 1..2 reads their tensors only, and gets the same values.
    const std::vector<LayerLayout> layout = BuildModelLayout(model);
    const int64_t offset = layout[0].param_count;
    const int64_t count = layout[1].param_count + layout[2].param_count;
    absl::StatusOr<std::vector<float>> middle = site::ImportLayers(model, {1, 3}, dir);
    ASSERT_TRUE(middle.ok()) << middle.status();
    ASSERT_EQ(static_cast<int64_t>(middle->size()), count);
    EXPECT_TRUE(std::equal(middle->begin(), middle->end(), whole->begin() + offset));
  }
}

INSTANTIATE_TEST_SUITE_P(Models, HfRoundTripTest,
                         ::testing::Values(Case{ModelFamily::kGpt, 4, false},
                                           Case{ModelFamily::kGpt, 4, true},
                                           Case{ModelFamily::kLlama, 4, false},
                                           Case{ModelFamily::kLlama, 2, false},
                                           Case{ModelFamily::kLlama, 1, true}),
                         [](const auto& info) {
                           return std::string(ToString(info.param.family)) + "_kv" +
                                  std::to_string(info.param.kv_heads) +
                                  (info.param.tied ? "_tied" : "");
                         });

// What a user gets for a directory that does not fit the job: every error names the file and
// what is wrong.
TEST(HfImportErrorsTest, NameTheFileAndTheTensor) {
  const ModelSpec model = Tiny(ModelFamily::kLlama, 2, false);
  const fs::path dir = Export(model, RandomParams(model), site::SafetensorsDtype::kF32, "errors");
  auto error = [&](const ModelSpec& m) {
    absl::StatusOr<std::vector<float>> r = site::ImportLayers(m, {0, m.NumLayers()}, dir);
    EXPECT_FALSE(r.ok());
    return std::string(r.status().message());
  };
  ModelSpec heads = model;
  heads.gpt.heads = 8, heads.gpt.kv_heads = 4;  // same shapes, other heads
  EXPECT_NE(error(heads).find("num_attention_heads is 4 but the job spec's model.heads is 8"),
            std::string::npos)
      << error(heads);
  ModelSpec theta = model;
  theta.gpt.rope_theta = 10000.0;
  EXPECT_NE(error(theta).find("rope_theta"), std::string::npos);
  ModelSpec wider = model;
  wider.gpt.mlp_dim = 48;
  EXPECT_NE(error(wider).find("tensor model.layers.0.mlp.gate_proj.weight is [40, 32]; the job's "
                              "model needs [48, 32]"),
            std::string::npos)
      << error(wider);
  ModelSpec gpt = model;
  gpt.family = ModelFamily::kGpt;
  EXPECT_NE(error(gpt).find("model_type 'llama'"), std::string::npos) << error(gpt);
  // A truncated file: its header claims more bytes than there are.
  fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") - 100);
  const std::string truncated = error(model);
  EXPECT_NE(truncated.find("model.safetensors"), std::string::npos) << truncated;
  fs::remove(dir / "model.safetensors");
  EXPECT_NE(error(model).find("cannot read"), std::string::npos);
}

}  // namespace
}  // namespace strait::tools
