// Stage: split invariance (bit-identical to the unsplit model), determinism, API contract.
#include "site/nn/stage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "site/backend/counter_rng.h"
#include "site/backend/cpu/cpu_backend.h"

namespace strait {
namespace {

ModelSpec Mlp() {
  ModelSpec m;
  m.family = ModelFamily::kMlp;
  m.mlp.input = 20;
  m.mlp.hidden = {16, 12, 12, 8};  // 5 layers
  m.mlp.classes = 4;
  m.mlp.activation = Activation::kGelu;
  m.mlp.dropout = 0.1f;
  m.init_seed = 11;
  return m;
}

ModelSpec Vit() {
  ModelSpec m;
  m.family = ModelFamily::kVit;
  m.vit.channels = 1;
  m.vit.height = 8;
  m.vit.width = 8;
  m.vit.patch = 4;
  m.vit.dim = 16;
  m.vit.depth = 3;  // 5 layers
  m.vit.heads = 2;
  m.vit.mlp_dim = 24;
  m.vit.classes = 4;
  m.vit.dropout = 0.1f;
  m.init_seed = 5;
  return m;
}

struct StepResult {
  std::vector<float> logits;  // every microbatch's, in order
  std::vector<float> grads;   // all stages' gradient arenas, concatenated
  std::vector<float> params;  // after the optimizer step
  double loss = 0;
};

// One training step of `stages` chained through host buffers, GPipe order: all forwards, then
// backwards 0..M-1, like a federation with lossless links.
StepResult RunStep(std::vector<std::unique_ptr<Stage>>& stages, int64_t step, int microbatches,
                   int n) {
  StepResult r;
  const int64_t in = stages.front()->input_features();
  const int global = microbatches * n;
  for (auto& s : stages) s->ZeroGrad();
  for (int m = 0; m < microbatches; ++m) {
    std::vector<float> x(n * in);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = 2 * CounterUniform(CombineKey(step, m), i) - 1;
    }
    for (auto& s : stages) {
      std::vector<float> y(n * s->output_features());
      EXPECT_TRUE(s->Forward(step, m, n, x.data(), y.data()).ok());
      x = std::move(y);
    }
    r.logits.insert(r.logits.end(), x.begin(), x.end());
    std::vector<int32_t> labels(n);
    for (int i = 0; i < n; ++i) labels[i] = (i + m + static_cast<int>(step)) % 4;
    auto loss = stages.back()->Loss(m, labels.data(), 1.0f / global);
    EXPECT_TRUE(loss.ok()) << loss.status();
    r.loss += loss->loss_sum;
  }
  for (int m = 0; m < microbatches; ++m) {
    std::vector<float> dy;
    for (size_t k = stages.size(); k-- > 0;) {
      std::vector<float> dx(k > 0 ? n * stages[k]->input_features() : 0);
      EXPECT_TRUE(stages[k]
                      ->Backward(m, dy.empty() ? nullptr : dy.data(), k > 0 ? dx.data() : nullptr)
                      .ok());
      dy = std::move(dx);
    }
  }
  double sum_squares = 0;
  for (auto& s : stages) sum_squares += *s->GradSumSquares();
  const float scale = GlobalNormClipScale(sum_squares, 0.5);
  for (auto& s : stages) {
    auto g = s->Grads();
    r.grads.insert(r.grads.end(), g->begin(), g->end());
    EXPECT_TRUE(s->OptimizerStep(step + 1, scale).ok());
    auto p = s->Params();
    r.params.insert(r.params.end(), p->begin(), p->end());
  }
  return r;
}

std::vector<std::unique_ptr<Stage>> MakeStages(const ModelSpec& model,
                                               const std::vector<LayerRange>& ranges,
                                               Backend* backend, OptimizerKind opt) {
  OptimizerSpec o;
  o.kind = opt;
  o.lr = 0.01;
  o.weight_decay = 0.01;
  std::vector<std::unique_ptr<Stage>> stages;
  for (LayerRange r : ranges) {
    auto s = Stage::Create(model, r, o, 6, backend);
    EXPECT_TRUE(s.ok()) << s.status();
    stages.push_back(*std::move(s));
  }
  return stages;
}

void ExpectSplitInvariant(const ModelSpec& model, OptimizerKind opt) {
  auto backend = CreateCpuBackend(2);
  auto whole = MakeStages(model, {{0, 5}}, backend.get(), opt);
  auto split = MakeStages(model, {{0, 2}, {2, 5}}, backend.get(), opt);
  for (int64_t step = 0; step < 3; ++step) {
    StepResult a = RunStep(whole, step, 3, 6);
    StepResult b = RunStep(split, step, 3, 6);
    ASSERT_EQ(a.logits, b.logits) << "step " << step;  // bit-identical
    ASSERT_EQ(a.grads, b.grads) << "step " << step;
    ASSERT_EQ(a.params, b.params) << "step " << step;
    ASSERT_EQ(a.loss, b.loss);
  }
}

TEST(StageTest, MlpSplitIsBitIdentical) { ExpectSplitInvariant(Mlp(), OptimizerKind::kAdamW); }
TEST(StageTest, VitSplitIsBitIdentical) { ExpectSplitInvariant(Vit(), OptimizerKind::kSgd); }

TEST(StageTest, ParametersDependOnlyOnSeedLayerAndParam) {
  auto backend = CreateCpuBackend(1);
  auto whole = MakeStages(Vit(), {{0, 5}}, backend.get(), OptimizerKind::kAdamW);
  auto tail = MakeStages(Vit(), {{3, 5}}, backend.get(), OptimizerKind::kAdamW);
  std::vector<float> all = *whole[0]->Params(), part = *tail[0]->Params();
  EXPECT_EQ(std::vector<float>(all.end() - part.size(), all.end()), part);
  ModelSpec other = Vit();
  other.init_seed = 6;
  auto reseeded = MakeStages(other, {{3, 5}}, backend.get(), OptimizerKind::kAdamW);
  EXPECT_NE(*reseeded[0]->Params(), part);
}

TEST(StageTest, RepeatedRunsAreBitIdentical) {
  auto backend = CreateCpuBackend(2);
  auto a = MakeStages(Mlp(), {{0, 5}}, backend.get(), OptimizerKind::kAdamW);
  auto b = MakeStages(Mlp(), {{0, 5}}, backend.get(), OptimizerKind::kAdamW);
  for (int64_t step = 0; step < 2; ++step) {
    EXPECT_EQ(RunStep(a, step, 2, 5).params, RunStep(b, step, 2, 5).params);
  }
}

TEST(StageTest, ContractErrors) {
  auto backend = CreateCpuBackend(1);
  auto stages = MakeStages(Mlp(), {{0, 2}, {2, 5}}, backend.get(), OptimizerKind::kSgd);
  std::vector<float> x(7 * 20);
  EXPECT_EQ(stages[0]->Forward(0, 0, 7, x.data(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // more than max_batch
  EXPECT_EQ(stages[0]->Backward(3, x.data(), nullptr).code(),
            absl::StatusCode::kFailedPrecondition);  // never forwarded
  ASSERT_TRUE(stages[0]->Forward(0, 0, 2, x.data(), nullptr).ok());
  EXPECT_EQ(stages[0]->Forward(0, 0, 2, x.data(), nullptr).code(),
            absl::StatusCode::kFailedPrecondition);  // already in flight
  int32_t labels[2] = {0, 1};
  EXPECT_EQ(stages[0]->Loss(0, labels, 1.0f).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not the last stage
  ASSERT_TRUE(stages[1]->Forward(0, 0, 2, x.data(), nullptr).ok());
  EXPECT_EQ(stages[1]->Backward(0, nullptr, nullptr).code(),
            absl::StatusCode::kFailedPrecondition);  // no Loss yet
  labels[1] = 9;
  EXPECT_EQ(stages[1]->Loss(0, labels, 1.0f).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Stage::Create(Mlp(), {3, 7}, OptimizerSpec{}, 4, backend.get()).ok());
}

}  // namespace
}  // namespace strait
