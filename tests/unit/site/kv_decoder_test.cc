// The key/value-cached decoder (site/nn/kv_decoder.h) against the training forward: at every
// position its logits are the window forward's at that position, whole or split over two ranges
// of layers, and it refuses what it cannot decode.
#include "site/nn/kv_decoder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "site/backend/cpu/cpu_backend.h"
#include "site/nn/stage.h"

namespace strait::site {
namespace {

ModelSpec Gpt() {
  ModelSpec m;
  m.family = ModelFamily::kGpt;
  m.init_seed = 3;
  m.gpt = GptSpec{.vocab = 256, .context = 12, .dim = 32, .depth = 2, .heads = 4, .mlp_dim = 64};
  return m;
}

// Grouped-query attention: 4 query heads share 2 key/value heads.
ModelSpec Llama() {
  ModelSpec m = Gpt();
  m.family = ModelFamily::kLlama;
  m.gpt.kv_heads = 2;
  m.gpt.mlp_dim = 48;
  return m;
}

// The whole window's logits [context, vocab] from the training forward.
std::vector<float> WindowLogits(const ModelSpec& model, const std::vector<float>& params,
                                const std::vector<float>& window) {
  auto backend = *CreateCpuBackend(1);
  auto stage = *Stage::Create(model, {0, model.NumLayers()}, 1, backend.get());
  auto weights = *DeviceBuffer::Create(backend.get(), sizeof(float) * params.size());
  auto grads = *DeviceBuffer::Create(backend.get(), sizeof(float) * params.size());
  backend->CopyToDevice(weights.f32(), params.data(), sizeof(float) * params.size());
  std::vector<LayerParams> views = stage->Views(weights.f32(), grads.f32());
  std::vector<const LayerParams*> pointers;
  for (const LayerParams& v : views) pointers.push_back(&v);
  std::vector<float> logits(int64_t{model.gpt.context} * model.gpt.vocab);
  EXPECT_TRUE(
      stage->Forward(0, 1, window.data(), logits.data(), pointers, {.training = false}).ok());
  return logits;
}

class KvDecoderFamilyTest : public ::testing::TestWithParam<ModelFamily> {};

TEST_P(KvDecoderFamilyTest, EveryPositionsLogitsAreTheWindowForwardsWholeOrSplit) {
  const ModelSpec model = GetParam() == ModelFamily::kGpt ? Gpt() : Llama();
  auto backend = *CreateCpuBackend(1);
  const std::vector<float> params =
      (*Stage::Create(model, {0, model.NumLayers()}, 1, backend.get()))->InitialParams().value();
  const std::vector<float> window = {3, 99, 12, 250, 7, 7, 61, 0, 128, 44, 5, 200};
  const std::vector<float> expected = WindowLogits(model, params, window);
  auto whole = KvDecoder::Create(model, {0, 4}, params);
  ASSERT_TRUE(whole.ok()) << whole.status();
  // The same layers in two decoders, as two sites would hold them.
  const int64_t first_part = (*Stage::Create(model, {0, 2}, 1, backend.get()))->param_count();
  auto front = KvDecoder::Create(model, {0, 2},
                                 std::vector<float>(params.begin(), params.begin() + first_part));
  auto back = KvDecoder::Create(model, {2, 4},
                                std::vector<float>(params.begin() + first_part, params.end()));
  ASSERT_TRUE(front.ok() && back.ok()) << front.status() << back.status();
  const int vocab = model.gpt.vocab;
  for (size_t t = 0; t < window.size(); ++t) {
    absl::StatusOr<std::vector<float>> logits = (*whole)->Step({window[t]});
    ASSERT_TRUE(logits.ok()) << logits.status();
    absl::StatusOr<std::vector<float>> residual = (*front)->Step({window[t]});
    ASSERT_TRUE(residual.ok()) << residual.status();
    ASSERT_EQ(residual->size(), 32u);
    absl::StatusOr<std::vector<float>> split = (*back)->Step(*residual);
    ASSERT_TRUE(split.ok()) << split.status();
    for (int c = 0; c < vocab; ++c) {
      const float want = expected[t * vocab + c];
      EXPECT_NEAR((*logits)[c], want, 1e-4f + 1e-4f * std::abs(want)) << "position " << t;
      EXPECT_EQ((*split)[c], (*logits)[c]) << "position " << t;
    }
  }
  EXPECT_EQ((*whole)->position(), 12);
  EXPECT_EQ((*whole)->Step({1}).status().code(), absl::StatusCode::kFailedPrecondition);
  (*whole)->Reset();
  absl::StatusOr<std::vector<float>> again = (*whole)->Step({window[0]});
  ASSERT_TRUE(again.ok());
  EXPECT_NEAR((*again)[5], expected[5], 1e-4f + 1e-4f * std::abs(expected[5]));
}

INSTANTIATE_TEST_SUITE_P(Families, KvDecoderFamilyTest,
                         ::testing::Values(ModelFamily::kGpt, ModelFamily::kLlama),
                         [](const auto& info) { return std::string(ToString(info.param)); });

TEST(KvDecoderTest, RefusesWhatItCannotDecode) {
  const ModelSpec model = Gpt();
  EXPECT_THAT(KvDecoder::Create(model, {0, 4}, std::vector<float>(10)).status().message(),
              ::testing::HasSubstr("given 10"));
  ModelSpec mlp;
  mlp.mlp.hidden = {8};
  EXPECT_FALSE(KvDecoder::Create(mlp, {0, 2}, {}).ok());
  auto backend = *CreateCpuBackend(1);
  auto d = KvDecoder::Create(
      model, {0, 4}, (*Stage::Create(model, {0, 4}, 1, backend.get()))->InitialParams().value());
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)->Step({256}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*d)->Step({1.5f}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*d)->Step({1, 2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*d)->position(), 0);
}

}  // namespace
}  // namespace strait::site
