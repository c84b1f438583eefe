// A site's per-layer profile (site/plan/layer_profile.h): one entry per layer with positive times
// and the memory of its layout (parameters, AdamW's two moments, one microbatch in flight), for
// every family; bad options refused. The figures themselves are measurements, not checked here.
#include "site/plan/layer_profile.h"

#include <gtest/gtest.h>

#include "core/model_layout.h"
#include "site/pipeline/weight_history.h"

namespace strait::site {
namespace {

ModelSpec Mlp() {
  ModelSpec m;
  m.family = ModelFamily::kMlp;
  m.mlp.input = 20;
  m.mlp.hidden = {16, 12};
  m.mlp.classes = 4;
  return m;
}

ModelSpec Gpt() {
  ModelSpec m;
  m.family = ModelFamily::kGpt;
  m.gpt.vocab = 16;
  m.gpt.context = 6;
  m.gpt.dim = 16;
  m.gpt.depth = 1;
  m.gpt.heads = 2;
  m.gpt.mlp_dim = 32;
  return m;
}

void ExpectProfileOfEveryLayer(const ModelSpec& model) {
  const LayerRange all{0, model.NumLayers()};
  absl::StatusOr<std::vector<plan::LayerProfile>> profile =
      ProfileLayers(model, all, OptimizerSpec{}, {}, {.microbatch = 4, .warmup = 1, .repeats = 3});
  ASSERT_TRUE(profile.ok()) << profile.status();
  const std::vector<LayerLayout> layout = BuildModelLayout(model);
  ASSERT_EQ(profile->size(), layout.size());
  for (size_t k = 0; k < layout.size(); ++k) {
    const plan::LayerProfile& p = (*profile)[k];
    EXPECT_EQ(p.layer, static_cast<int>(k));
    EXPECT_GT(p.forward_s, 0.0) << k;
    EXPECT_GT(p.backward_s, 0.0) << k;
    EXPECT_GT(p.update_s, 0.0) << k;
    EXPECT_EQ(p.param_bytes, 4 * layout[k].param_count) << k;
    EXPECT_EQ(p.optimizer_bytes, 2 * p.param_bytes) << k;  // AdamW: two moments.
    EXPECT_GE(p.microbatch_bytes, 4 * 4 * NumElements(layout[k].out_shape)) << k;
  }
}

TEST(LayerProfileTest, MlpHasOneEntryPerLayerWithItsMemory) { ExpectProfileOfEveryLayer(Mlp()); }
TEST(LayerProfileTest, GptHasOneEntryPerLayerWithItsMemory) { ExpectProfileOfEveryLayer(Gpt()); }

TEST(LayerProfileTest, ProfilesWithTheWeightVersionsOf2bw) {
  TrainingSpec training;
  training.schedule = Schedule::k2BW;
  absl::StatusOr<std::vector<plan::LayerProfile>> profile = ProfileLayers(
      Mlp(), {0, 3}, OptimizerSpec{}, {},
      {.microbatch = 4, .warmup = 1, .repeats = 1, .versioning = VersioningOf(training)});
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_GT((*profile)[1].update_s, 0.0);
}

TEST(LayerProfileTest, RefusesBadOptions) {
  EXPECT_FALSE(ProfileLayers(Mlp(), {0, 3}, {}, {}, {.microbatch = 0}).ok());
  EXPECT_FALSE(ProfileLayers(Mlp(), {0, 3}, {}, {}, {.microbatch = 4, .repeats = 0}).ok());
  EXPECT_FALSE(ProfileLayers(Mlp(), {0, 9}, {}, {}, {.microbatch = 4}).ok());
  EXPECT_FALSE(ProfileLayers(Mlp(), {0, 3}, {}, {}, {.microbatch = 4, .min_run_s = -1}).ok());
}

}  // namespace
}  // namespace strait::site
