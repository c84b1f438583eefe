// Checkpoints cut into layers and joined again (site/nn/checkpoint_layers.h): what a layer that
// changes owner carries.
#include "site/nn/checkpoint_layers.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/model_layout.h"
#include "site/backend/counter_rng.h"
#include "site/backend/cpu/cpu_backend.h"
#include "site/nn/stage.h"

namespace strait::site {
namespace {

ModelSpec Gpt() {
  ModelSpec m;
  m.family = ModelFamily::kGpt;
  m.gpt = {.vocab = 9, .context = 4, .dim = 8, .depth = 3, .heads = 2, .mlp_dim = 12};
  m.gpt.tie_embeddings = true;
  return m;
}

int64_t Floats(const ModelSpec& model, LayerRange range) {
  int64_t n = 0;
  const std::vector<LayerLayout> layout = BuildModelLayout(model);
  for (int i = range.start; i < range.end; ++i) {
    for (const ParamLayout& p : layout[i].params) n += p.numel;
  }
  return n;
}

std::vector<float> Values(int64_t n, uint64_t key) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = CounterUniform(key, i);
  return v;
}

// A 2bw AdamW checkpoint with lookahead of layers `range`, every float distinct.
CheckpointState Checkpoint(const ModelSpec& model, LayerRange range) {
  CheckpointState s;
  s.step = 12;
  s.optimizer_kind = static_cast<uint32_t>(OptimizerKind::kAdamW);
  s.fingerprint = StageFingerprint(model, range);
  s.first_layer = range.start, s.end_layer = range.end;
  s.init_seed = 3, s.data_seed = 4;
  s.weight_versions = 2;
  const int64_t n = Floats(model, range);
  s.params = Values(n, 1), s.previous_params = Values(n, 2), s.lookahead_params = Values(n, 3);
  s.optimizer_state = Values(2 * n, 4);
  s.lagged_clip_scale = 0.5f;
  return s;
}

TEST(CheckpointLayersTest, CutsJoinBackToTheWhole) {
  const ModelSpec model = Gpt();  // 5 layers: embed, 3 blocks, head
  const CheckpointState whole = Checkpoint(model, {0, 5});
  std::vector<CheckpointState> parts;
  for (LayerRange r : {LayerRange{0, 2}, LayerRange{2, 3}, LayerRange{3, 5}}) {
    absl::StatusOr<CheckpointState> cut = CutLayers(whole, model, r);
    ASSERT_TRUE(cut.ok()) << cut.status();
    EXPECT_EQ(cut->fingerprint, StageFingerprint(model, r));
    EXPECT_EQ(cut->params.size(), static_cast<size_t>(Floats(model, r)));
    parts.push_back(*std::move(cut));
  }
  // The middle block's AdamW v starts after every layer's m.
  const int64_t n = Floats(model, {0, 5}), before = Floats(model, {0, 2});
  EXPECT_EQ(parts[1].optimizer_state.back(),
            whole.optimizer_state[n + before + parts[1].params.size() - 1]);
  absl::StatusOr<CheckpointState> joined = JoinLayers(parts, model);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(*SerializeCheckpoint(*joined), *SerializeCheckpoint(whole));
  // A part of a part is the same part of the whole.
  absl::StatusOr<CheckpointState> block =
      CutLayers(*JoinLayers({parts[1], parts[2]}, model), model, {3, 4});
  ASSERT_TRUE(block.ok());
  EXPECT_EQ(*SerializeCheckpoint(*block), *SerializeCheckpoint(*CutLayers(whole, model, {3, 4})));
}

TEST(CheckpointLayersTest, FingerprintIsTheStages) {
  const ModelSpec model = Gpt();
  auto backend = *CreateCpuBackend(1);
  for (LayerRange r : {LayerRange{0, 5}, LayerRange{1, 3}, LayerRange{4, 5}}) {
    auto stage = Stage::Create(model, r, 2, backend.get());
    ASSERT_TRUE(stage.ok());
    EXPECT_EQ((*stage)->Fingerprint(), StageFingerprint(model, r));
  }
}

TEST(CheckpointLayersTest, RefusesWhatDoesNotFit) {
  const ModelSpec model = Gpt();
  const CheckpointState whole = Checkpoint(model, {0, 5});
  EXPECT_FALSE(CutLayers(whole, model, {4, 6}).ok());
  EXPECT_FALSE(CutLayers(whole, model, {2, 2}).ok());
  CheckpointState beyond = whole;
  beyond.end_layer = 9;
  EXPECT_FALSE(CutLayers(beyond, model, {0, 1}).ok());
  CheckpointState short_state = whole;
  short_state.optimizer_state.pop_back();
  EXPECT_FALSE(CutLayers(short_state, model, {0, 1}).ok());

  const CheckpointState a = *CutLayers(whole, model, {0, 2}), b = *CutLayers(whole, model, {2, 5});
  EXPECT_TRUE(JoinLayers({a, b}, model).ok());
  absl::Status gap = JoinLayers({a, *CutLayers(whole, model, {3, 5})}, model).status();
  EXPECT_EQ(gap.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(gap.message().find("the layers before it end at 2"), std::string::npos) << gap;
  CheckpointState later = b;
  later.step = 13;
  EXPECT_NE(JoinLayers({a, later}, model).status().message().find("step 13"), std::string::npos);
  CheckpointState foreign = b;
  foreign.fingerprint ^= 1;
  EXPECT_FALSE(JoinLayers({a, foreign}, model).ok());
  CheckpointState no_clip = b;
  no_clip.lagged_clip_scale.reset();
  EXPECT_FALSE(JoinLayers({a, no_clip}, model).ok());
  EXPECT_FALSE(JoinLayers({}, model).ok());
}

// What a MOVE frame carries: a cut as floats, and back; anything else is refused.
TEST(CheckpointLayersTest, PartsTravelAsFloats) {
  const ModelSpec model = Gpt();
  const CheckpointState whole = Checkpoint(model, {0, 5});
  const CheckpointState cut = *CutLayers(whole, model, {1, 3});
  const std::vector<float> floats = LayerPartToFloats(&cut);
  absl::StatusOr<std::optional<CheckpointState>> back = LayerPartFromFloats(floats, whole, model);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ(*SerializeCheckpoint(**back), *SerializeCheckpoint(cut));
  back = LayerPartFromFloats(LayerPartToFloats(nullptr), whole, model);
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->has_value());

  std::vector<float> shorter = floats;
  shorter.pop_back();
  EXPECT_THAT(std::string(LayerPartFromFloats(shorter, whole, model).status().message()),
              ::testing::HasSubstr("layers [1, 3) take"));
  for (std::vector<float> bad :
       {std::vector<float>{}, std::vector<float>{1.5f, 2.0f}, std::vector<float>{3.0f, 2.0f},
        std::vector<float>{0.0f, 9.0f}, std::vector<float>{-1.0f, 2.0f},
        std::vector<float>{2.0f, 2.0f, 1.0f}, std::vector<float>{std::nanf(""), 1.0f}}) {
    EXPECT_FALSE(LayerPartFromFloats(bad, whole, model).ok()) << bad.size();
  }
}

}  // namespace
}  // namespace strait::site
