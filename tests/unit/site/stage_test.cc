// Stage and the StageExecutor that drives it (one worker): split invariance (bit-identical to the
// unsplit model), determinism, API contract, per-layer weights handed to the stage, and the two
// weight versions of 2bw against a hand-written loop of its semantics.
#include "site/nn/stage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "site/backend/counter_rng.h"
#include "site/backend/cpu/cpu_backend.h"
#include "site/nn/optimizer.h"
#include "site/pipeline/stage_executor.h"

namespace strait::site {
namespace {

using site::ForwardOptions;
using site::kNewestWeights;
using site::StageExecutor;
using site::WeightVersioning;

constexpr float kPi = 3.14159265358979f;

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

// A small GPT (byte-sized vocabulary of 11, context 9): embed, two blocks, head.
ModelSpec Gpt() {
  ModelSpec m;
  m.family = ModelFamily::kGpt;
  m.gpt.vocab = 11;
  m.gpt.context = 9;
  m.gpt.dim = 16;
  m.gpt.depth = 2;  // 4 layers
  m.gpt.heads = 2;
  m.gpt.mlp_dim = 24;
  m.gpt.dropout = 0.1f;
  m.init_seed = 3;
  return m;
}

struct StepResult {
  std::vector<float> logits;  // every microbatch's, in order
  std::vector<float> grads;   // all stages' gradient arenas, concatenated
  std::vector<float> params;  // after the optimizer step
  double loss = 0;
};

// One training step of `stages` chained through host buffers, GPipe order: all forwards, then
// backwards 0..M-1, like a federation with lossless links. vocab > 0: a language model's step
// (token ids in, a label per token).
StepResult RunStep(std::vector<std::unique_ptr<StageExecutor>>& stages, int64_t step,
                   int microbatches, int n, int vocab = 0) {
  StepResult r;
  const int64_t in = stages.front()->input_features();
  const int per_sample = vocab > 0 ? static_cast<int>(in) : 1;
  const int global = microbatches * n * per_sample;
  for (auto& s : stages) s->ZeroGrad();
  for (int m = 0; m < microbatches; ++m) {
    std::vector<float> x(n * in);
    for (size_t i = 0; i < x.size(); ++i) {
      const float u = CounterUniform(CombineKey(step, m), i);
      x[i] = vocab > 0 ? std::floor(u * vocab) : 2 * u - 1;
    }
    for (auto& s : stages) {
      std::vector<float> y(n * s->output_features());
      EXPECT_TRUE(s->Forward(step, m, n, x.data(), y.data()).ok());
      x = std::move(y);
    }
    r.logits.insert(r.logits.end(), x.begin(), x.end());
    std::vector<int32_t> labels(n * per_sample);
    for (size_t i = 0; i < labels.size(); ++i) {
      labels[i] = (static_cast<int>(i) + m + static_cast<int>(step)) % (vocab > 0 ? vocab : 4);
    }
    auto loss = stages.back()->Loss(m, labels.data(), 1.0f / global);
    EXPECT_TRUE(loss.ok()) << loss.status();
    r.loss += loss->loss_sum;
  }
  for (int m = 0; m < microbatches; ++m) {
    std::vector<float> dy;
    for (size_t k = stages.size(); k-- > 0;) {
      std::vector<float> dx(k > 0 ? n * stages[k]->input_features() : 0);
      EXPECT_TRUE(stages[k]
                      ->Backward(m, dy.empty() ? nullptr : dy.data(), k > 0 ? dx.data() : nullptr,
                                 m == microbatches - 1)
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

// A stage of one CPU worker of `threads` threads (results depend on the thread count only).
std::unique_ptr<StageExecutor> MakeStage(const ModelSpec& model, LayerRange range,
                                         const OptimizerSpec& o, int threads,
                                         WeightVersioning versioning = {},
                                         Precision precision = Precision::kFp32) {
  site::StageWorkers worker;
  worker.threads = threads;
  worker.precision = precision;
  auto s = StageExecutor::Create(model, range, o, 6, versioning, worker);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

std::vector<std::unique_ptr<StageExecutor>> MakeStages(const ModelSpec& model,
                                                       const std::vector<LayerRange>& ranges,
                                                       int threads, OptimizerKind opt,
                                                       Precision precision = Precision::kFp32) {
  OptimizerSpec o;
  o.kind = opt;
  o.lr = 0.01;
  o.weight_decay = 0.01;
  std::vector<std::unique_ptr<StageExecutor>> stages;
  for (LayerRange r : ranges) stages.push_back(MakeStage(model, r, o, threads, {}, precision));
  return stages;
}

// Inputs and labels of microbatch m of step `step` (the same for every caller).
std::vector<float> Inputs(int64_t step, int m, int n, int64_t features) {
  std::vector<float> x(n * features);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 2 * CounterUniform(CombineKey(step, m), i) - 1;
  return x;
}
std::vector<int32_t> Labels(int64_t step, int m, int n) {
  std::vector<int32_t> labels(n);
  for (int i = 0; i < n; ++i) labels[i] = (i + 3 * m + static_cast<int>(step)) % 4;
  return labels;
}

void ExpectSplitInvariant(const ModelSpec& model, OptimizerKind opt) {
  auto whole = MakeStages(model, {{0, 5}}, 2, opt);
  auto split = MakeStages(model, {{0, 2}, {2, 5}}, 2, opt);
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

// bf16 activations (training.precision: bf16): a boundary between stages widens a bf16 tensor to
// f32 and narrows it back, both exact, so a split model still trains the whole one's bits.
TEST(StageTest, Bf16SplitIsBitIdentical) {
  for (const ModelSpec& model : {Mlp(), Vit(), Gpt()}) {
    SCOPED_TRACE(ToString(model.family));
    const int layers = model.NumLayers();
    auto whole = MakeStages(model, {{0, layers}}, 2, OptimizerKind::kAdamW, Precision::kBf16);
    auto split =
        MakeStages(model, {{0, 2}, {2, layers}}, 2, OptimizerKind::kAdamW, Precision::kBf16);
    const int vocab = model.family == ModelFamily::kGpt ? model.gpt.vocab : 0;
    for (int64_t step = 0; step < 3; ++step) {
      StepResult a = RunStep(whole, step, 3, 6, vocab);
      StepResult b = RunStep(split, step, 3, 6, vocab);
      ASSERT_EQ(a.logits, b.logits) << "step " << step;
      ASSERT_EQ(a.grads, b.grads) << "step " << step;
      ASSERT_EQ(a.params, b.params) << "step " << step;
      ASSERT_EQ(a.loss, b.loss);
    }
  }
}

// The same steps in bf16 and f32 differ by bf16's rounding only: logits within a few bf16 ulps
// of their scale, the loss within 1%.
TEST(StageTest, Bf16StepsStayNearFp32) {
  const ModelSpec model = Gpt();
  const int layers = model.NumLayers();
  auto f32 = MakeStages(model, {{0, layers}}, 2, OptimizerKind::kAdamW);
  auto bf16 = MakeStages(model, {{0, layers}}, 2, OptimizerKind::kAdamW, Precision::kBf16);
  for (int64_t step = 0; step < 3; ++step) {
    StepResult a = RunStep(f32, step, 3, 6, model.gpt.vocab);
    StepResult b = RunStep(bf16, step, 3, 6, model.gpt.vocab);
    EXPECT_NE(a.logits, b.logits);
    float scale = 0.0f;
    for (float v : a.logits) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < a.logits.size(); ++i) {
      ASSERT_NEAR(b.logits[i], a.logits[i], 0.05f * scale) << "step " << step << " logit " << i;
    }
    EXPECT_NEAR(b.loss, a.loss, 0.01 * a.loss) << "step " << step;
  }
}

TEST(StageTest, ParametersDependOnlyOnSeedLayerAndParam) {
  auto whole = MakeStages(Vit(), {{0, 5}}, 1, OptimizerKind::kAdamW);
  auto tail = MakeStages(Vit(), {{3, 5}}, 1, OptimizerKind::kAdamW);
  std::vector<float> all = *whole[0]->Params(), part = *tail[0]->Params();
  EXPECT_EQ(std::vector<float>(all.end() - part.size(), all.end()), part);
  ModelSpec other = Vit();
  other.init_seed = 6;
  auto reseeded = MakeStages(other, {{3, 5}}, 1, OptimizerKind::kAdamW);
  EXPECT_NE(*reseeded[0]->Params(), part);
}

TEST(StageTest, RepeatedRunsAreBitIdentical) {
  auto a = MakeStages(Mlp(), {{0, 5}}, 2, OptimizerKind::kAdamW);
  auto b = MakeStages(Mlp(), {{0, 5}}, 2, OptimizerKind::kAdamW);
  for (int64_t step = 0; step < 2; ++step) {
    EXPECT_EQ(RunStep(a, step, 2, 5).params, RunStep(b, step, 2, 5).params);
  }
}

TEST(StageTest, ContractErrors) {
  auto stages = MakeStages(Mlp(), {{0, 2}, {2, 5}}, 1, OptimizerKind::kSgd);
  std::vector<float> x(7 * 20);
  EXPECT_EQ(stages[0]->Forward(0, 0, 7, x.data(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // more than max_batch
  EXPECT_EQ(stages[0]->Backward(3, x.data(), nullptr, true).code(),
            absl::StatusCode::kFailedPrecondition);  // never forwarded
  ASSERT_TRUE(stages[0]->Forward(0, 0, 2, x.data(), nullptr).ok());
  EXPECT_EQ(stages[0]->Forward(0, 0, 2, x.data(), nullptr).code(),
            absl::StatusCode::kFailedPrecondition);  // already in flight
  int32_t labels[2] = {0, 1};
  EXPECT_EQ(stages[0]->Loss(0, labels, 1.0f).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not the last stage
  ASSERT_TRUE(stages[1]->Forward(0, 0, 2, x.data(), nullptr).ok());
  EXPECT_EQ(stages[1]->Backward(0, nullptr, nullptr, true).code(),
            absl::StatusCode::kFailedPrecondition);  // no Loss yet
  labels[1] = 9;
  EXPECT_EQ(stages[1]->Loss(0, labels, 1.0f).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stages[1]->Forward(1, 1, 2, x.data(), nullptr, {.layer_weights = {0, 0}}).code(),
            absl::StatusCode::kInvalidArgument);  // weights for 2 of its 3 layers
  EXPECT_FALSE(StageExecutor::Create(Mlp(), {3, 7}, OptimizerSpec{}, 4, {}, {}).ok());

  // The Stage itself: no Backward before Loss on the last stage, one view per layer.
  auto backend = *CreateCpuBackend(1);
  auto stage = *Stage::Create(Mlp(), {2, 5}, 6, backend.get());
  std::vector<float> weights(stage->param_count()), grads(stage->param_count());
  const std::vector<LayerParams> views = stage->Views(weights.data(), grads.data());
  const std::vector<const LayerParams*> all = {&views[0], &views[1], &views[2]};
  ASSERT_TRUE(stage->Forward(0, 2, x.data(), nullptr, all).ok());
  EXPECT_EQ(stage->Backward(0, nullptr, nullptr, all).code(),
            absl::StatusCode::kFailedPrecondition);  // no Loss yet
  EXPECT_EQ(stage->Forward(1, 2, x.data(), nullptr, WeightViews(all).subspan(1)).code(),
            absl::StatusCode::kInvalidArgument);  // two views for three layers
  EXPECT_FALSE(Stage::Create(Mlp(), {3, 7}, 4, backend.get()).ok());
}

// A stage computes each layer with the view it is handed: layers 0-1 from one weight arena and
// 2-4 from another give the bits of two stages [0, 2) and [2, 5) on those arenas (what `strait
// train` does to imitate sites whose stages use different weight versions).
TEST(StageTest, ComputesEachLayerWithTheWeightsItIsHanded) {
  auto backend = *CreateCpuBackend(1);
  const ModelSpec model = Mlp();
  auto whole = *Stage::Create(model, {0, 5}, 6, backend.get());
  auto head = *Stage::Create(model, {0, 2}, 6, backend.get());
  auto tail = *Stage::Create(model, {2, 5}, 6, backend.get());
  const int64_t split = whole->layer_offsets()[2];
  std::vector<float> older = whole->InitialParams().value(), newer = older;
  for (size_t i = 0; i < newer.size(); ++i) newer[i] += 0.01f * (CounterUniform(3, i) - 0.5f);
  std::vector<float> grads_whole(whole->param_count()), grads_head(split),
      grads_tail(whole->param_count() - split);
  const std::vector<LayerParams> old_views = whole->Views(older.data(), grads_whole.data());
  const std::vector<LayerParams> new_views = whole->Views(newer.data(), grads_whole.data());
  std::vector<const LayerParams*> mixed;
  for (int k = 0; k < 5; ++k) mixed.push_back(k < 2 ? &old_views[k] : &new_views[k]);
  const std::vector<LayerParams> head_views = head->Views(older.data(), grads_head.data());
  const std::vector<LayerParams> tail_views = tail->Views(newer.data() + split, grads_tail.data());
  const std::vector<const LayerParams*> head_list = {&head_views[0], &head_views[1]};
  const std::vector<const LayerParams*> tail_list = {&tail_views[0], &tail_views[1],
                                                     &tail_views[2]};

  std::vector<float> x = Inputs(0, 0, 6, whole->input_features());
  const std::vector<int32_t> labels = Labels(0, 0, 6);
  std::vector<float> y_whole(6 * 4), y_head(6 * head->output_features()), y_tail(6 * 4);
  ASSERT_TRUE(whole->Forward(0, 6, x.data(), y_whole.data(), mixed, {.step = 2}).ok());
  ASSERT_TRUE(head->Forward(0, 6, x.data(), y_head.data(), head_list, {.step = 2}).ok());
  ASSERT_TRUE(tail->Forward(0, 6, y_head.data(), y_tail.data(), tail_list, {.step = 2}).ok());
  EXPECT_EQ(y_whole, y_tail);
  ASSERT_TRUE(whole->Loss(0, labels.data(), 0.5f).ok());
  ASSERT_TRUE(tail->Loss(0, labels.data(), 0.5f).ok());
  std::vector<float> dy(6 * head->output_features());
  ASSERT_TRUE(whole->Backward(0, nullptr, nullptr, mixed).ok());
  ASSERT_TRUE(tail->Backward(0, nullptr, dy.data(), tail_list).ok());
  ASSERT_TRUE(head->Backward(0, dy.data(), nullptr, head_list).ok());
  EXPECT_EQ(std::vector<float>(grads_whole.begin(), grads_whole.begin() + split), grads_head);
  EXPECT_EQ(std::vector<float>(grads_whole.begin() + split, grads_whole.end()), grads_tail);
  EXPECT_NE(grads_head, std::vector<float>(split, 0.0f));
}

// Checkpoints carry Stage::Fingerprint: its recipe must not change, or checkpoints written by
// earlier builds stop loading. These values were printed by the build before the stage API moved
// weight versions out of Stage (and must stay what they are).
TEST(StageTest, FingerprintIsStableAcrossBuilds) {
  auto backend = *CreateCpuBackend(1);
  EXPECT_EQ((*Stage::Create(Mlp(), {0, 5}, 6, backend.get()))->Fingerprint(),
            17111667145296457435ull);
  EXPECT_EQ((*Stage::Create(Mlp(), {2, 5}, 6, backend.get()))->Fingerprint(),
            14762594344455960033ull);
  EXPECT_EQ((*Stage::Create(Vit(), {0, 5}, 6, backend.get()))->Fingerprint(),
            17259866485475633407ull);
}

// Forward + loss + backward of every microbatch of `step` with weights `weights`, then the clip
// scale of its gradient (max norm 0.5). Returns the loss sum.
double Accumulate(StageExecutor& stage, int64_t step, int microbatches, int n, int64_t weights,
                  float* scale) {
  double loss = 0;
  stage.ZeroGrad(step);
  for (int m = 0; m < microbatches; ++m) {
    std::vector<float> x = Inputs(step, m, n, stage.input_features());
    EXPECT_TRUE(stage.Forward(step, m, n, x.data(), nullptr, {.weights = weights}).ok());
    std::vector<int32_t> labels = Labels(step, m, n);
    auto result = stage.Loss(m, labels.data(), 1.0f / (microbatches * n));
    EXPECT_TRUE(result.ok()) << result.status();
    loss += result->loss_sum;
    EXPECT_TRUE(stage.Backward(m, nullptr, nullptr, m == microbatches - 1).ok());
  }
  *scale = GlobalNormClipScale(*stage.GradSumSquares(0.0, step), 0.5);
  return loss;
}

// 2bw with one process: step t computes g_t at L_{t-1} (L_0 for t = 0, 1) and L_{t+1} =
// Opt(L_t, clip(g_t)). The reference is a one-version stage whose weights are swapped by hand:
// SetParams(L_{t-1}) to compute g_t, SetParams(L_t) to apply it.
TEST(StageTest, TwoWeightVersionsFollowTheTwoBwSemantics) {
  OptimizerSpec o;
  o.kind = OptimizerKind::kAdamW;
  o.lr = 0.01;
  o.weight_decay = 0.01;
  const ModelSpec model = Mlp();
  auto two = MakeStage(model, {0, 5}, o, 2, {2, 0.0f});
  auto manual = MakeStage(model, {0, 5}, o, 2);
  EXPECT_EQ(two->weight_versions(), 2);
  std::vector<float> previous = *manual->Params(), newest = previous;  // L_{t-1}, L_t
  for (int64_t t = 0; t < 5; ++t) {
    SCOPED_TRACE(testing::Message() << "step " << t);
    float scale_two = 0, scale_manual = 0;
    const double loss_two = Accumulate(*two, t, 3, 6, std::max<int64_t>(t - 1, 0), &scale_two);
    ASSERT_TRUE(manual->SetParams(t == 0 ? newest : previous).ok());
    const double loss_manual = Accumulate(*manual, t, 3, 6, kNewestWeights, &scale_manual);
    ASSERT_EQ(loss_two, loss_manual);
    ASSERT_EQ(scale_two, scale_manual);
    ASSERT_EQ(*two->Grads(t), *manual->Grads());
    ASSERT_TRUE(two->OptimizerStep(t + 1, scale_two).ok());
    ASSERT_TRUE(manual->SetParams(newest).ok());
    ASSERT_TRUE(manual->OptimizerStep(t + 1, scale_manual).ok());
    previous = newest;
    newest = *manual->Params();
    EXPECT_EQ(two->weights_version(), t + 1);
    ASSERT_EQ(*two->Params(), newest);
    ASSERT_EQ(*two->PreviousParams(), previous);
    ASSERT_EQ(*two->OptimizerState(), *manual->OptimizerState());
  }
  // One update stale: not the same training as 1f1b after the first update.
  auto flushed = MakeStage(model, {0, 5}, o, 2);
  auto two_again = MakeStage(model, {0, 5}, o, 2, {2, 0.0f});
  for (int64_t t = 0; t < 2; ++t) {
    float scale = 0;
    Accumulate(*flushed, t, 3, 6, t, &scale);
    ASSERT_TRUE(flushed->OptimizerStep(t + 1, scale).ok());
    Accumulate(*two_again, t, 3, 6, std::max<int64_t>(t - 1, 0), &scale);
    ASSERT_TRUE(two_again->OptimizerStep(t + 1, scale).ok());
    if (t == 0) {
      EXPECT_EQ(*two_again->Params(), *flushed->Params());  // L_1: both from L_0
    }
  }
  EXPECT_NE(*two_again->Params(), *flushed->Params());
}

// 2bw with lookahead c: step t computes g_t at P_{t-1} = L_{t-1} + c (L_{t-1} - L_{t-2}) (P_0 =
// L_0) and L_{t+1} = Opt(L_t, clip(g_t)). The same hand-written reference, computing P on the host
// with each product rounded as Backend::Axpby does; the checkpoint arrays restore a stage mid-run.
TEST(StageTest, LookaheadComputesWithTheExtrapolatedWeights) {
  OptimizerSpec o;
  o.kind = OptimizerKind::kAdamW;
  o.lr = 0.01;
  const float c = 2.0f;
  const ModelSpec model = Mlp();
  auto two = MakeStage(model, {0, 5}, o, 2, {2, c});
  auto manual = MakeStage(model, {0, 5}, o, 2);
  EXPECT_EQ(two->lookahead(), c);
  auto predict = [c](const std::vector<float>& newest, const std::vector<float>& previous) {
    std::vector<float> p(newest.size());
    for (size_t i = 0; i < p.size(); ++i) {
      const float a = (1.0f + c) * newest[i], b = -c * previous[i];
      p[i] = a + b;
    }
    return p;
  };
  std::vector<float> newest = *manual->Params();    // L_t
  std::vector<float> uses = newest, next = newest;  // P_{t-1} (what step t computes with), P_t
  for (int64_t t = 0; t < 5; ++t) {
    SCOPED_TRACE(testing::Message() << "step " << t);
    float scale_two = 0, scale_manual = 0;
    const double loss_two = Accumulate(*two, t, 3, 6, std::max<int64_t>(t - 1, 0), &scale_two);
    ASSERT_TRUE(manual->SetParams(uses).ok());
    const double loss_manual = Accumulate(*manual, t, 3, 6, kNewestWeights, &scale_manual);
    ASSERT_EQ(loss_two, loss_manual);
    ASSERT_EQ(*two->Grads(t), *manual->Grads());
    ASSERT_TRUE(two->OptimizerStep(t + 1, scale_two).ok());
    ASSERT_TRUE(manual->SetParams(newest).ok());
    ASSERT_TRUE(manual->OptimizerStep(t + 1, scale_manual).ok());
    const std::vector<float> previous = newest;
    newest = *manual->Params();
    uses = next;
    next = predict(newest, previous);
    ASSERT_EQ(*two->Params(), newest);
    ASSERT_EQ(*two->PreviousParams(), uses);
    ASSERT_EQ(*two->LookaheadParams(), next);
  }
  // Restored from its arrays, a fresh stage goes on with the same bits.
  auto restored = MakeStage(model, {0, 5}, o, 2, {2, c});
  ASSERT_TRUE(restored
                  ->RestoreWeights(two->weights_version(), *two->Params(), *two->PreviousParams(),
                                   *two->LookaheadParams())
                  .ok());
  ASSERT_TRUE(restored->SetOptimizerState(*two->OptimizerState()).ok());
  EXPECT_EQ(restored->RestoreWeights(5, *two->Params(), *two->PreviousParams()).code(),
            absl::StatusCode::kInvalidArgument);  // the lookahead array is missing
  for (auto* stage : {two.get(), restored.get()}) {
    float scale = 0;
    Accumulate(*stage, 5, 3, 6, 4, &scale);
    ASSERT_TRUE(stage->OptimizerStep(6, scale).ok());
  }
  EXPECT_EQ(*restored->Params(), *two->Params());
  EXPECT_EQ(*restored->LookaheadParams(), *two->LookaheadParams());
  EXPECT_EQ(StageExecutor::Create(model, {0, 5}, o, 6, {1, c}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);  // lookahead needs two versions
}

// A microbatch keeps the weights of its Forward when an update comes in between (2bw: step t+1's
// first forwards run before the update of g_{t-1}), and its gradient goes to its step's arena.
TEST(StageTest, BackwardUsesTheWeightsOfItsForwardAcrossAnUpdate) {
  OptimizerSpec o;
  o.lr = 0.05;
  auto a = MakeStage(Mlp(), {0, 5}, o, 1, {2, 0.0f});
  auto b = MakeStage(Mlp(), {0, 5}, o, 1, {2, 0.0f});
  float scale = 0;
  Accumulate(*a, 0, 2, 4, 0, &scale);
  Accumulate(*b, 0, 2, 4, 0, &scale);
  // a: step 1's microbatch 0 forward, then the update of g_0 (L_1), then its loss and backward.
  std::vector<float> x = Inputs(1, 0, 4, a->input_features());
  std::vector<int32_t> labels = Labels(1, 0, 4);
  a->ZeroGrad(1);
  ASSERT_TRUE(a->Forward(1, 0, 4, x.data(), nullptr, {.weights = 0}).ok());
  ASSERT_TRUE(a->OptimizerStep(1, 1.0f).ok());
  ASSERT_TRUE(a->Loss(0, labels.data(), 0.125f).ok());
  ASSERT_TRUE(a->Backward(0, nullptr, nullptr, true).ok());
  // b: the update first, then the microbatch with the previous version L_0.
  ASSERT_TRUE(b->OptimizerStep(1, 1.0f).ok());
  b->ZeroGrad(1);
  ASSERT_TRUE(b->Forward(1, 0, 4, x.data(), nullptr, {.weights = 0}).ok());
  ASSERT_TRUE(b->Loss(0, labels.data(), 0.125f).ok());
  ASSERT_TRUE(b->Backward(0, nullptr, nullptr, true).ok());
  EXPECT_EQ(*a->Grads(1), *b->Grads(1));
  EXPECT_EQ(*a->Params(), *b->Params());
  EXPECT_NE(*a->Grads(1), *a->Grads(0));  // Step 0's gradient stayed in its own arena.
}

// ForwardOptions::layer_weights: layers 0-1 with L_0 and 2-4 with L_1 in one stage give the bits
// of a stage [0, 2) computing with L_0 followed by a stage [2, 5) computing with L_1, forward and
// backward (`strait train` imitating 2bw with update eager, where a later site has applied an
// update that an earlier one has not).
TEST(StageTest, LayerWeightsMixVersionsLikeSitesThatDiffer) {
  OptimizerSpec o;
  o.lr = 0.05;
  const WeightVersioning two{2, 0.0f};
  auto whole = MakeStage(Mlp(), {0, 5}, o, 1, two);
  auto head = MakeStage(Mlp(), {0, 2}, o, 1, two);
  auto tail = MakeStage(Mlp(), {2, 5}, o, 1, two);
  float scale = 0;
  Accumulate(*whole, 0, 2, 4, 0, &scale);
  // The split pair accumulates the same step 0 chained, as two sites would (the same bits).
  head->ZeroGrad(0);
  tail->ZeroGrad(0);
  for (int m = 0; m < 2; ++m) {
    std::vector<float> x = Inputs(0, m, 4, 20), h(4 * head->output_features()), dh(h.size());
    std::vector<int32_t> labels = Labels(0, m, 4);
    ASSERT_TRUE(head->Forward(0, m, 4, x.data(), h.data(), {.weights = 0}).ok());
    ASSERT_TRUE(tail->Forward(0, m, 4, h.data(), nullptr, {.weights = 0}).ok());
    ASSERT_TRUE(tail->Loss(m, labels.data(), 1.0f / 8).ok());
    ASSERT_TRUE(tail->Backward(m, nullptr, dh.data(), m == 1).ok());
    ASSERT_TRUE(head->Backward(m, dh.data(), nullptr, m == 1).ok());
  }
  for (StageExecutor* s : {whole.get(), head.get(), tail.get()}) {
    ASSERT_TRUE(s->OptimizerStep(1, 1.0f).ok());  // L_1; L_0 kept as the previous version
  }
  // Step 1: the head computes with L_0, the tail with L_1.
  whole->ZeroGrad(1);
  head->ZeroGrad(1);
  tail->ZeroGrad(1);
  std::vector<float> x = Inputs(1, 0, 4, 20), h(4 * head->output_features()), dh(h.size());
  std::vector<float> y_whole(4 * 4), y_tail(4 * 4);
  std::vector<int32_t> labels = Labels(1, 0, 4);
  ASSERT_TRUE(
      whole->Forward(1, 0, 4, x.data(), y_whole.data(), {.layer_weights = {0, 0, 1, 1, 1}}).ok());
  ASSERT_TRUE(head->Forward(1, 0, 4, x.data(), h.data(), {.weights = 0}).ok());
  ASSERT_TRUE(tail->Forward(1, 0, 4, h.data(), y_tail.data(), {.weights = 1}).ok());
  EXPECT_EQ(y_whole, y_tail);
  ASSERT_TRUE(whole->Loss(0, labels.data(), 0.25f).ok());
  ASSERT_TRUE(tail->Loss(0, labels.data(), 0.25f).ok());
  // The update to L_2 would drop L_0, which layers 0-1 of the microbatch still use.
  EXPECT_EQ(whole->OptimizerStep(2, 1.0f).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(whole->Backward(0, nullptr, nullptr, true).ok());
  ASSERT_TRUE(tail->Backward(0, nullptr, dh.data(), true).ok());
  ASSERT_TRUE(head->Backward(0, dh.data(), nullptr, true).ok());
  std::vector<float> split = *head->Grads(1);
  const std::vector<float> tail_grads = *tail->Grads(1);
  split.insert(split.end(), tail_grads.begin(), tail_grads.end());
  EXPECT_EQ(*whole->Grads(1), split);
  // And it differs from computing every layer with either version alone.
  std::vector<float> y_old(4 * 4);
  ASSERT_TRUE(whole->Forward(1, 1, 4, x.data(), y_old.data(), {.weights = 0}).ok());
  whole->Discard(1);
  EXPECT_NE(y_old, y_whole);
}

TEST(StageTest, WeightVersionContractErrors) {
  std::vector<float> x(6 * 20);
  EXPECT_EQ(StageExecutor::Create(Mlp(), {0, 2}, OptimizerSpec{}, 6, {3, 0.0f}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto one = MakeStage(Mlp(), {0, 2}, OptimizerSpec{}, 1);
  EXPECT_EQ(one->Forward(0, 0, 2, x.data(), nullptr, {.weights = 1}).code(),
            absl::StatusCode::kFailedPrecondition);  // L_1 does not exist yet
  EXPECT_EQ(one->PreviousParams().status().code(), absl::StatusCode::kFailedPrecondition);
  auto two = MakeStage(Mlp(), {0, 2}, OptimizerSpec{}, 1, {2, 0.0f});
  ASSERT_TRUE(two->OptimizerStep(1, 1.0f).ok());
  ASSERT_TRUE(two->OptimizerStep(2, 1.0f).ok());
  EXPECT_EQ(two->Forward(0, 0, 2, x.data(), nullptr, {.weights = 0}).code(),
            absl::StatusCode::kFailedPrecondition);  // L_0 was dropped by the update to L_2
  EXPECT_EQ(two->Forward(0, 0, 2, x.data(), nullptr, {.layer_weights = {2, 0}}).code(),
            absl::StatusCode::kFailedPrecondition);  // likewise for one layer of two
  ASSERT_TRUE(two->Forward(2, 0, 2, x.data(), nullptr, {.weights = 1}).ok());
  const std::vector<float> before = *two->Params();
  EXPECT_EQ(two->OptimizerStep(3, 1.0f).code(),
            absl::StatusCode::kFailedPrecondition);  // microbatch 0 still computes with L_1
  EXPECT_EQ(*two->Params(), before);
  EXPECT_EQ(two->weights_version(), 2);
  const std::vector<float> params(two->param_count(), 0.5f);
  EXPECT_EQ(two->RestoreWeights(4, params, {}).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(two->RestoreWeights(4, params, params).ok());
  EXPECT_EQ(two->weights_version(), 4);
}

// optimizer.warmup_steps: update k moves the parameters by lr * min(1, k / warmup) * gradient (SGD
// without momentum, so the step is exactly that).
// The step SGD without momentum takes on a gradient of 1 at updates 1 .. `updates`: its lr.
std::vector<float> LearningRates(const OptimizerSpec& spec, int updates) {
  auto backend = *CreateCpuBackend(1);
  auto optimizer = *Optimizer::Create(spec, 1, backend.get());
  float* param = static_cast<float*>(*backend->Allocate(sizeof(float)));
  float* grad = static_cast<float*>(*backend->Allocate(sizeof(float)));
  const float one = 1.0f;
  backend->CopyToDevice(grad, &one, sizeof(float));
  std::vector<float> rates;
  float before = 0.0f, after = 0.0f;
  for (int64_t k = 1; k <= updates; ++k) {
    backend->CopyToHost(&before, param, sizeof(float));
    optimizer->Step(k, 1.0f, param, grad);
    backend->CopyToHost(&after, param, sizeof(float));
    rates.push_back(before - after);
  }
  backend->Free(param);
  backend->Free(grad);
  return rates;
}

OptimizerSpec PlainSgd() {
  OptimizerSpec spec;
  spec.kind = OptimizerKind::kSgd;
  spec.lr = 0.5;
  spec.momentum = 0.0;
  return spec;
}

TEST(OptimizerTest, LearningRateWarmsUpLinearly) {
  OptimizerSpec spec = PlainSgd();
  spec.warmup_steps = 4;
  const std::vector<float> rates = LearningRates(spec, 6);
  for (int k = 1; k <= 6; ++k) {
    EXPECT_FLOAT_EQ(rates[k - 1], 0.5f * std::min(1.0f, k / 4.0f)) << "update " << k;
  }
}

// optimizer.decay cosine: update k uses lr (1 + cos(pi min(1, (k-1) / decay_steps))) / 2, after the
// warm-up factor; decay_steps 0 is filled in with the run's length.
TEST(OptimizerTest, LearningRateDecaysAlongACosine) {
  OptimizerSpec spec = PlainSgd();
  spec.decay = LrDecay::kCosine;
  spec.warmup_steps = 2;
  const std::vector<float> rates = LearningRates(WithDecayHorizon(spec, 4), 6);
  const float expected[6] = {0.5f * 0.5f, 0.5f * 0.5f * (1 + std::cos(kPi / 4)),
                             0.5f * 0.5f, 0.5f * 0.5f * (1 + std::cos(3 * kPi / 4)),
                             0.0f,        0.0f};
  for (int k = 1; k <= 6; ++k) {
    EXPECT_NEAR(rates[k - 1], expected[k - 1], 1e-6f) << "update " << k;
  }
  spec.decay_steps = 8;  // an explicit horizon stays
  EXPECT_EQ(WithDecayHorizon(spec, 4).decay_steps, 8);
  spec.decay = LrDecay::kNone;
  EXPECT_EQ(LearningRates(WithDecayHorizon(spec, 4), 6).back(), 0.5f);
}

}  // namespace
}  // namespace strait::site
