#include "core/model_layout.h"

#include <gmock/gmock.h>
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

TEST(ModelLayoutTest, ShardOfAnotherContextIsNamedAsSuch) {
  ModelSpec model;
  model.family = ModelFamily::kGpt;
  model.gpt =
      GptSpec{.vocab = 256, .context = 256, .dim = 64, .depth = 3, .heads = 4, .mlp_dim = 256};
  const std::vector<LayerLayout> layers = BuildModelLayout(model);
  const int64_t first_two = layers[0].param_count + layers[1].param_count;
  EXPECT_TRUE(CheckShardParams(model, {0, 2}, first_two, "a.ckpt").ok());
  // Trained with context 128: 128 rows of the position table fewer.
  absl::Status longer = CheckShardParams(model, {0, 2}, first_two - 128 * 64, "a.ckpt");
  EXPECT_EQ(longer.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(longer.message(), testing::HasSubstr("model.context 256 is longer than the position "
                                                   "table of a.ckpt (128 positions"));
  EXPECT_THAT(longer.message(), testing::HasSubstr("set model.context: 128"));
  absl::Status shorter = CheckShardParams(model, {0, 1}, layers[0].param_count + 64, "a.ckpt");
  EXPECT_THAT(shorter.message(), testing::HasSubstr("shorter than the position table"));
  // Blocks do not depend on the context: any other size is another model.
  absl::Status other = CheckShardParams(model, {1, 2}, layers[1].param_count + 64, "b.ckpt");
  EXPECT_THAT(other.message(), testing::HasSubstr("b.ckpt holds"));
  EXPECT_THAT(other.message(), testing::HasSubstr("use the job spec the run was trained with"));
}

TEST(ModelLayoutTest, ShapeHelpers) {
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({3, 4, 5}), 60);
  EXPECT_EQ(ShapeToString({32, 1024}), "[32, 1024]");
}

}  // namespace
}  // namespace strait
