// ReplicaGroup against a single Stage on the same data (DESIGN.md §4): W = 2 and 3 agree within
// float reduction order, W = 1 is bit-identical, the same W twice is bit-identical, and
// microbatches with fewer rows than workers work.
#include "site/collective/replica_group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "site/backend/backend_factory.h"
#include "site/backend/counter_rng.h"
#include "site/backend/cpu/cpu_backend.h"

namespace strait::collective {
namespace {

ModelSpec Mlp() {
  ModelSpec m;
  m.family = ModelFamily::kMlp;
  m.mlp.input = 20;
  m.mlp.hidden = {16, 12, 12, 8};  // 5 layers
  m.mlp.classes = 4;
  m.mlp.activation = Activation::kGelu;
  m.mlp.dropout = 0.2f;
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
  m.vit.dropout = 0.2f;
  m.init_seed = 5;
  return m;
}

OptimizerSpec Optimizer(OptimizerKind kind) {
  OptimizerSpec o;
  o.kind = kind;
  o.lr = 0.02;
  o.weight_decay = 0.01;
  return o;
}

constexpr int kMaxBatch = 6;

// A stage of the pipeline under test: a plain Stage or a ReplicaGroup, driven alike.
class Unit {
 public:
  virtual ~Unit() = default;
  virtual int64_t in() const = 0;
  virtual int64_t out() const = 0;
  virtual absl::Status Forward(int64_t step, int m, int n, const float* x, float* y) = 0;
  virtual absl::StatusOr<LossResult> Loss(int m, const int32_t* labels, float scale) = 0;
  virtual absl::Status Backward(int m, const float* dy, float* dx, bool last) = 0;
  virtual void ZeroGrad() = 0;
  virtual absl::StatusOr<double> GradSumSquares(double downstream) = 0;
  virtual absl::Status OptimizerStep(int64_t step, float scale) = 0;
  virtual std::vector<float> Params() = 0;
};

class StageUnit final : public Unit {
 public:
  StageUnit(const ModelSpec& model, LayerRange range, OptimizerKind opt, int threads)
      : backend_(CreateCpuBackend(threads)) {
    auto s = Stage::Create(model, range, Optimizer(opt), kMaxBatch, backend_.get());
    EXPECT_TRUE(s.ok()) << s.status();
    stage_ = *std::move(s);
  }
  int64_t in() const override { return stage_->input_features(); }
  int64_t out() const override { return stage_->output_features(); }
  absl::Status Forward(int64_t step, int m, int n, const float* x, float* y) override {
    return stage_->Forward(step, m, n, x, y);
  }
  absl::StatusOr<LossResult> Loss(int m, const int32_t* labels, float scale) override {
    return stage_->Loss(m, labels, scale);
  }
  absl::Status Backward(int m, const float* dy, float* dx, bool) override {
    return stage_->Backward(m, dy, dx);
  }
  void ZeroGrad() override { stage_->ZeroGrad(); }
  absl::StatusOr<double> GradSumSquares(double d) override { return stage_->GradSumSquares(d); }
  absl::Status OptimizerStep(int64_t step, float scale) override {
    return stage_->OptimizerStep(step, scale);
  }
  std::vector<float> Params() override { return *stage_->Params(); }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Stage> stage_;
};

class GroupUnit final : public Unit {
 public:
  GroupUnit(const ModelSpec& model, LayerRange range, OptimizerKind opt, int workers, int threads) {
    auto g = ReplicaGroup::Create(model, range, Optimizer(opt), kMaxBatch, DeviceKind::kCpu,
                                  workers, threads);
    EXPECT_TRUE(g.ok()) << g.status();
    group_ = *std::move(g);
  }
  int64_t in() const override { return group_->input_features(); }
  int64_t out() const override { return group_->output_features(); }
  absl::Status Forward(int64_t step, int m, int n, const float* x, float* y) override {
    return group_->Forward(step, m, n, x, y);
  }
  absl::StatusOr<LossResult> Loss(int m, const int32_t* labels, float scale) override {
    return group_->Loss(m, labels, scale);
  }
  absl::Status Backward(int m, const float* dy, float* dx, bool last) override {
    return group_->Backward(m, dy, dx, last);
  }
  void ZeroGrad() override { group_->ZeroGrad(); }
  absl::StatusOr<double> GradSumSquares(double d) override { return group_->GradSumSquares(d); }
  absl::Status OptimizerStep(int64_t step, float scale) override {
    return group_->OptimizerStep(step, scale);
  }
  std::vector<float> Params() override { return *group_->Params(); }
  ReplicaGroup& group() { return *group_; }

 private:
  std::unique_ptr<ReplicaGroup> group_;
};

using Pipeline = std::vector<std::unique_ptr<Unit>>;

struct StepResult {
  std::vector<float> outputs;  // the last unit's logits, every microbatch in order
  std::vector<float> params;   // every unit's, after the optimizer step
  double loss = 0;
  int64_t correct = 0;
  double grad_sum_squares = 0;
};

// One step, GPipe order, microbatches of sizes[m] rows, chained through host buffers.
StepResult RunStep(Pipeline& units, int64_t step, const std::vector<int>& sizes) {
  StepResult r;
  int global = 0;
  for (int n : sizes) global += n;
  for (auto& u : units) u->ZeroGrad();
  const int microbatches = static_cast<int>(sizes.size());
  for (int m = 0; m < microbatches; ++m) {
    const int n = sizes[m];
    std::vector<float> x(n * units.front()->in());
    for (size_t i = 0; i < x.size(); ++i) x[i] = 2 * CounterUniform(CombineKey(step, m), i) - 1;
    for (auto& u : units) {
      std::vector<float> y(n * u->out());
      EXPECT_TRUE(u->Forward(step, m, n, x.data(), y.data()).ok());
      x = std::move(y);
    }
    r.outputs.insert(r.outputs.end(), x.begin(), x.end());
    std::vector<int32_t> labels(n);
    for (int i = 0; i < n; ++i) labels[i] = (3 * i + m + static_cast<int>(step)) % 4;
    auto loss = units.back()->Loss(m, labels.data(), 1.0f / global);
    EXPECT_TRUE(loss.ok()) << loss.status();
    r.loss += loss->loss_sum;
    r.correct += loss->correct;
  }
  for (int m = 0; m < microbatches; ++m) {
    const int n = sizes[m];
    std::vector<float> dy;
    for (size_t k = units.size(); k-- > 0;) {
      std::vector<float> dx(k > 0 ? n * units[k]->in() : 0);
      EXPECT_TRUE(units[k]
                      ->Backward(m, dy.empty() ? nullptr : dy.data(), k > 0 ? dx.data() : nullptr,
                                 m == microbatches - 1)
                      .ok());
      dy = std::move(dx);
    }
  }
  for (size_t k = units.size(); k-- > 0;) {
    r.grad_sum_squares = *units[k]->GradSumSquares(r.grad_sum_squares);
  }
  for (auto& u : units) {
    EXPECT_TRUE(u->OptimizerStep(step + 1, 1.0f).ok());
    std::vector<float> p = u->Params();
    r.params.insert(r.params.end(), p.begin(), p.end());
  }
  return r;
}

// workers[k] = 0: unit k is a plain Stage; otherwise a ReplicaGroup of that many workers.
Pipeline Make(const ModelSpec& model, const std::vector<LayerRange>& ranges,
              const std::vector<int>& workers, OptimizerKind opt, int threads = 1) {
  Pipeline units;
  for (size_t k = 0; k < ranges.size(); ++k) {
    if (workers[k] == 0) {
      units.push_back(std::make_unique<StageUnit>(model, ranges[k], opt, threads));
    } else {
      units.push_back(std::make_unique<GroupUnit>(model, ranges[k], opt, workers[k], threads));
    }
  }
  return units;
}

// max |a - b| / max |b|: the difference relative to the tensor's scale (elements near zero would
// make an element-wise ratio measure nothing but rounding).
double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double{a[i]} - b[i]));
    scale = std::max(scale, std::abs(double{b[i]}));
  }
  return diff / scale;
}

void ExpectCloseToStage(const ModelSpec& model, const std::vector<LayerRange>& ranges,
                        const std::vector<int>& workers, OptimizerKind opt,
                        const std::vector<int>& sizes) {
  Pipeline reference = Make(model, ranges, std::vector<int>(ranges.size(), 0), opt);
  Pipeline group = Make(model, ranges, workers, opt);
  for (int64_t step = 0; step < 3; ++step) {
    StepResult a = RunStep(reference, step, sizes), b = RunStep(group, step, sizes);
    EXPECT_LT(RelativeDifference(b.outputs, a.outputs), 1e-5) << "step " << step;
    EXPECT_LT(RelativeDifference(b.params, a.params), 1e-5) << "step " << step;
    EXPECT_NEAR(b.loss, a.loss, 1e-5 * a.loss) << "step " << step;
    EXPECT_EQ(b.correct, a.correct) << "step " << step;
    EXPECT_NEAR(b.grad_sum_squares, a.grad_sum_squares, 1e-5 * a.grad_sum_squares);
  }
}

TEST(ReplicaGroupTest, MlpTwoWorkersMatchesStage) {
  ExpectCloseToStage(Mlp(), {{0, 5}}, {2}, OptimizerKind::kSgd, {6, 5, 6});
}

TEST(ReplicaGroupTest, MlpThreeWorkersMatchesStage) {
  ExpectCloseToStage(Mlp(), {{0, 5}}, {3}, OptimizerKind::kSgd, {6, 4, 5});
}

TEST(ReplicaGroupTest, MlpSplitPipelineWithMixedWorkers) {
  // Sites with 1, 2 and 3 workers next to each other (the "mixed workers").
  ExpectCloseToStage(Mlp(), {{0, 2}, {2, 4}, {4, 5}}, {1, 2, 3}, OptimizerKind::kSgd, {6, 6});
}

TEST(ReplicaGroupTest, VitTwoWorkersMatchesStage) {
  ExpectCloseToStage(Vit(), {{0, 5}}, {2}, OptimizerKind::kSgd, {6, 5});
}

TEST(ReplicaGroupTest, VitThreeWorkersSplitPipelineMatchesStage) {
  ExpectCloseToStage(Vit(), {{0, 2}, {2, 5}}, {3, 2}, OptimizerKind::kSgd, {6, 4});
}

TEST(ReplicaGroupTest, FewerRowsThanWorkers) {
  ExpectCloseToStage(Mlp(), {{0, 5}}, {3}, OptimizerKind::kSgd, {2, 1, 6});
  ExpectCloseToStage(Vit(), {{0, 5}}, {3}, OptimizerKind::kSgd, {1, 2});
}

void ExpectBitIdentical(Pipeline& a, Pipeline& b, const std::vector<int>& sizes) {
  for (int64_t step = 0; step < 3; ++step) {
    StepResult x = RunStep(a, step, sizes), y = RunStep(b, step, sizes);
    ASSERT_EQ(x.outputs, y.outputs) << "step " << step;
    ASSERT_EQ(x.params, y.params) << "step " << step;
    ASSERT_EQ(x.loss, y.loss) << "step " << step;
    ASSERT_EQ(x.grad_sum_squares, y.grad_sum_squares) << "step " << step;
  }
}

TEST(ReplicaGroupTest, OneWorkerIsBitIdenticalToStage) {
  for (const ModelSpec& model : {Mlp(), Vit()}) {
    Pipeline stage = Make(model, {{0, 2}, {2, 5}}, {0, 0}, OptimizerKind::kAdamW, 2);
    Pipeline group = Make(model, {{0, 2}, {2, 5}}, {1, 1}, OptimizerKind::kAdamW, 2);
    ExpectBitIdentical(stage, group, {6, 3});
  }
}

TEST(ReplicaGroupTest, SameWorkersTwiceIsBitIdentical) {
  for (const ModelSpec& model : {Mlp(), Vit()}) {
    Pipeline a = Make(model, {{0, 5}}, {3}, OptimizerKind::kAdamW);
    Pipeline b = Make(model, {{0, 5}}, {3}, OptimizerKind::kAdamW);
    ExpectBitIdentical(a, b, {6, 5, 2});
  }
}

TEST(ReplicaGroupTest, ReplicasStayIdenticalAndSettersReachAll) {
  auto group = ReplicaGroup::Create(Mlp(), {0, 5}, Optimizer(OptimizerKind::kAdamW), kMaxBatch,
                                    DeviceKind::kCpu, 2, 1);
  ASSERT_TRUE(group.ok()) << group.status();
  ReplicaGroup& g = **group;
  EXPECT_EQ(g.workers(), 2);
  EXPECT_EQ(g.device_names(), "cpu (1 threads), cpu (1 threads)");
  // New parameters everywhere: a step on two identical rows gives identical halves, and the
  // forward of one row per worker equals the forward of either row alone.
  std::vector<float> params(g.param_count());
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.1f * (CounterUniform(7, i) - 0.5f);
  ASSERT_TRUE(g.SetParams(params).ok());
  EXPECT_EQ(*g.Params(), params);
  std::vector<float> x(2 * g.input_features()), y(2 * g.output_features());
  for (int64_t i = 0; i < g.input_features(); ++i) x[i] = x[i + g.input_features()] = 0.01f * i;
  ASSERT_TRUE(g.Forward(0, 0, 2, x.data(), y.data(), /*training=*/false).ok());
  g.Discard(0);
  EXPECT_TRUE(
      std::equal(y.begin(), y.begin() + g.output_features(), y.begin() + g.output_features()));
  auto state = g.OptimizerState();
  ASSERT_TRUE(state.ok());
  std::vector<float> new_state(state->size(), 0.25f);
  ASSERT_TRUE(g.SetOptimizerState(new_state).ok());
  EXPECT_EQ(*g.OptimizerState(), new_state);
}

TEST(ReplicaGroupTest, ContractErrors) {
  EXPECT_FALSE(
      ReplicaGroup::Create(Mlp(), {0, 5}, OptimizerSpec{}, 6, DeviceKind::kCpu, 0, 1).ok());
  auto group = ReplicaGroup::Create(Mlp(), {0, 2}, OptimizerSpec{}, 6, DeviceKind::kCpu, 2, 1);
  ASSERT_TRUE(group.ok()) << group.status();
  ReplicaGroup& g = **group;
  std::vector<float> x(7 * g.input_features());
  EXPECT_EQ(g.Forward(0, 0, 7, x.data(), nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.Forward(0, 0, 0, x.data(), nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.Backward(3, x.data(), nullptr, true).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(g.Forward(0, 0, 3, x.data(), nullptr).ok());
  EXPECT_EQ(g.Forward(0, 0, 3, x.data(), nullptr).code(), absl::StatusCode::kFailedPrecondition);
  int32_t labels[3] = {0, 1, 2};
  EXPECT_EQ(g.Loss(0, labels, 1.0f).status().code(), absl::StatusCode::kFailedPrecondition);
  std::vector<float> dy(3 * g.output_features(), 0.5f);
  EXPECT_TRUE(g.Backward(0, dy.data(), nullptr, true).ok());
  if (!BuiltWithCuda()) {
    EXPECT_EQ(ReplicaGroup::Create(Mlp(), {0, 5}, OptimizerSpec{}, 6, DeviceKind::kCuda, 2, 1)
                  .status()
                  .code(),
              absl::StatusCode::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace strait::collective
