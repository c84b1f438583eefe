// Text generation: the sampler's rules, causality (a token's logits do not depend on later
// tokens), determinism, and that a model trained on one repeated line continues it.
#include "site/nn/text_generator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "site/backend/cpu/cpu_backend.h"
#include "site/pipeline/trainer.h"

namespace strait::site {
namespace {

ModelSpec TinyGpt() {
  ModelSpec m;
  m.family = ModelFamily::kGpt;
  m.gpt = GptSpec{.vocab = 256, .context = 16, .dim = 32, .depth = 2, .heads = 4, .mlp_dim = 64};
  return m;
}

std::vector<float> InitialParams(const ModelSpec& model) {
  auto backend = *CreateCpuBackend(1);
  return (*Stage::Create(model, {0, model.NumLayers()}, 1, backend.get()))->InitialParams().value();
}

TEST(SampleTokenTest, TemperatureZeroAndTopOneTakeTheMostLikely) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 1.5f};
  EXPECT_EQ(SampleToken(logits, {.temperature = 0.0}, 0.99), 1);  // Ties: the lower id.
  EXPECT_EQ(SampleToken(logits, {.temperature = 1.0, .top_k = 1}, 0.99), 1);
  // Top-2 of equal logits: half the draws each.
  EXPECT_EQ(SampleToken(logits, {.temperature = 1.0, .top_k = 2}, 0.49), 1);
  EXPECT_EQ(SampleToken(logits, {.temperature = 1.0, .top_k = 2}, 0.51), 3);
  // All tokens: the least likely one at the top of [0, 1).
  EXPECT_EQ(SampleToken(logits, {.temperature = 1.0, .top_k = 0}, 0.999999), 2);
}

TEST(TextGeneratorTest, LogitsDependOnlyOnEarlierTokens) {
  const ModelSpec model = TinyGpt();
  auto g = TextGenerator::Create(model, InitialParams(model), *CreateCpuBackend(1));
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<int32_t> a = {'a', 'b', 'c'}, ab = {'a', 'b'};
  auto after_ab = (*g)->NextLogits(ab);
  ASSERT_TRUE(after_ab.ok()) << after_ab.status();
  EXPECT_NE(*after_ab, *(*g)->NextLogits(a));
  EXPECT_EQ(*after_ab, *(*g)->NextLogits(ab));  // Deterministic.
  // A window longer than the context sees its last `context` tokens only.
  std::vector<int32_t> longer(40, 'x');
  std::vector<int32_t> tail(16, 'x');
  longer[0] = 'q';
  EXPECT_EQ(*(*g)->NextLogits(longer), *(*g)->NextLogits(tail));
}

TEST(TextGeneratorTest, WrongParameterCountIsAClearError) {
  const ModelSpec model = TinyGpt();
  auto g = TextGenerator::Create(model, std::vector<float>(10), *CreateCpuBackend(1));
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), ::testing::HasSubstr("10 parameters"));
}

TEST(TextGeneratorTest, ATrainedModelContinuesItsText) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "strait_generate";
  std::filesystem::create_directories(dir);
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  std::ofstream(dir / "corpus.txt") << text;
  JobSpec spec;
  spec.model = TinyGpt();
  spec.data.kind = DatasetKind::kText;
  spec.data.path = (dir / "corpus.txt").string();
  spec.training.steps = 80;
  spec.training.global_batch = 16;
  spec.training.microbatches = 2;
  spec.training.optimizer.lr = 1e-2;
  auto trainer = Trainer::Create(spec, *CreateCpuBackend(2));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  for (int i = 0; i < 80; ++i) ASSERT_TRUE((*trainer)->Step().ok());
  auto g = TextGenerator::Create(spec.model, *(*trainer)->stage().Params(), *CreateCpuBackend(1));
  ASSERT_TRUE(g.ok()) << g.status();
  const std::string prompt = "the quick brown ";
  auto out =
      (*g)->Generate(std::vector<int32_t>(prompt.begin(), prompt.end()), 12, {.temperature = 0.0});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(std::string(out->begin(), out->end()), "the quick brown fox jumps ov");
  // Within the context the key/value cache decodes; greedy, it picks what whole windows pick.
  std::vector<int32_t> windowed = {'t', 'h', 'e', ' '};
  for (int i = 0; i < 12; ++i) {
    auto logits = (*g)->NextLogits(windowed);
    ASSERT_TRUE(logits.ok());
    windowed.push_back(SampleToken(*logits, {.temperature = 0.0}, 0.5));
  }
  auto cached = (*g)->Generate({'t', 'h', 'e', ' '}, 12, {.temperature = 0.0});
  ASSERT_TRUE(cached.ok()) << cached.status();
  EXPECT_EQ(*cached, windowed) << std::string(cached->begin(), cached->end());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strait::site
