#include "core/model_layout.h"

#include <gtest/gtest.h>

namespace strait {
namespace {

TEST(ModelLayoutTest, MlpLayersAndParameterCounts) {
  ModelSpec model;
  model.family = ModelFamily::kMlp;
  model.mlp.input = 784;
  model.mlp.hidden = {1024, 1024, 1024, 1024};
  model.mlp.classes = 10;
  std::vector<LayerLayout> layers = BuildModelLayout(model);
  ASSERT_EQ(layers.size(), 5u);
  EXPECT_EQ(layers[0].name, "fc0+relu");
  EXPECT_EQ(layers[4].name, "fc4");
  EXPECT_EQ(layers[0].in_shape, (std::vector<int64_t>{784}));
  EXPECT_EQ(layers[4].out_shape, (std::vector<int64_t>{10}));
  ASSERT_EQ(layers[0].params.size(), 2u);
  EXPECT_EQ(layers[0].params[0].name, "weight");
  EXPECT_EQ(layers[0].params[0].shape, (std::vector<int64_t>{1024, 784}));  // [out, in]
  EXPECT_EQ(layers[0].params[1].shape, (std::vector<int64_t>{1024}));
  int64_t total = 0;
  for (const auto& l : layers) total += l.param_count;
  EXPECT_EQ(total, (784 * 1024 + 1024) + 3 * (1024 * 1024 + 1024) + (1024 * 10 + 10));
  // Each layer's input is the previous layer's output.
  for (size_t i = 1; i < layers.size(); ++i) EXPECT_EQ(layers[i].in_shape, layers[i - 1].out_shape);
}

TEST(ModelLayoutTest, VitLayersShapesAndParameters) {
  ModelSpec model;
  model.family = ModelFamily::kVit;
  model.vit = VitSpec{.channels = 1,
                      .height = 28,
                      .width = 28,
                      .patch = 7,
                      .dim = 64,
                      .depth = 4,
                      .heads = 4,
                      .mlp_dim = 256,
                      .classes = 10};
  std::vector<LayerLayout> layers = BuildModelLayout(model);
  ASSERT_EQ(layers.size(), 6u);
  EXPECT_EQ(layers[0].name, "patch_embed");
  EXPECT_EQ(layers[0].out_shape, (std::vector<int64_t>{17, 64}));  // 16 patches + class token
  EXPECT_EQ(layers[0].param_count, 49 * 64 + 64 + 64 + 17 * 64);
  EXPECT_EQ(layers[1].name, "block0");
  EXPECT_EQ(layers[1].param_count, 2 * 64 + (64 * 192 + 192) + (64 * 64 + 64) + 2 * 64 +
                                       (64 * 256 + 256) + (256 * 64 + 64));
  EXPECT_EQ(layers[5].name, "head");
  EXPECT_EQ(layers[5].out_shape, (std::vector<int64_t>{10}));
  EXPECT_EQ(layers[5].param_count, 2 * 64 + 64 * 10 + 10);
  for (size_t i = 1; i < layers.size(); ++i) EXPECT_EQ(layers[i].in_shape, layers[i - 1].out_shape);
}

TEST(ModelLayoutTest, GptLayersShapesAndParameters) {
  ModelSpec model;
  model.family = ModelFamily::kGpt;
  model.gpt =
      GptSpec{.vocab = 256, .context = 128, .dim = 64, .depth = 3, .heads = 4, .mlp_dim = 256};
  EXPECT_EQ(model.NumLayers(), 5);
  EXPECT_EQ(model.InputFeatures(), 128);
  EXPECT_EQ(model.Classes(), 256);
  EXPECT_EQ(model.TargetsPerSample(), 128);
  std::vector<LayerLayout> layers = BuildModelLayout(model);
  ASSERT_EQ(layers.size(), 5u);
  EXPECT_EQ(layers[0].name, "embed");
  EXPECT_EQ(layers[0].in_shape, (std::vector<int64_t>{128}));
  EXPECT_EQ(layers[0].out_shape, (std::vector<int64_t>{128, 64}));  // The residual stream.
  EXPECT_EQ(layers[0].param_count, 256 * 64 + 128 * 64);
  EXPECT_EQ(layers[1].name, "block0");
  EXPECT_EQ(layers[1].param_count, 2 * 64 + (64 * 192 + 192) + (64 * 64 + 64) + 2 * 64 +
                                       (64 * 256 + 256) + (256 * 64 + 64));
  EXPECT_EQ(layers[4].name, "lm_head");
  EXPECT_EQ(layers[4].out_shape, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(layers[4].param_count, 2 * 64 + 64 * 256 + 256);
  for (size_t i = 1; i < layers.size(); ++i) EXPECT_EQ(layers[i].in_shape, layers[i - 1].out_shape);
}

TEST(ModelLayoutTest, ShapeHelpers) {
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({3, 4, 5}), 60);
  EXPECT_EQ(ShapeToString({32, 1024}), "[32, 1024]");
}

}  // namespace
}  // namespace strait
