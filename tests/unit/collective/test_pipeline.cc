#include "tests/unit/collective/test_pipeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "site/backend/counter_rng.h"
#include "site/backend/cpu/cpu_backend.h"

namespace strait::site::harness {
namespace {

// One Stage with its weights, gradients and optimizer driven directly, without a StageExecutor:
// the reference that the executor's one worker must reproduce bit for bit.
class StageUnit final : public Unit {
 public:
  StageUnit(const ModelSpec& model, LayerRange range, OptimizerKind opt, int threads)
      : backend_(*CreateCpuBackend(threads)) {
    auto s = Stage::Create(model, range, kMaxBatch, backend_.get());
    EXPECT_TRUE(s.ok()) << s.status();
    stage_ = *std::move(s);
    history_ = *WeightHistory::Create(*stage_, {});
    optimizer_ = *Optimizer::Create(TestOptimizer(opt), stage_->param_count(), backend_.get());
    const std::vector<LayerParams>& views = **history_->Views(kNewestWeights, 0, "test");
    for (const LayerParams& v : views) views_.push_back(&v);
  }
  int64_t in() const override { return stage_->input_features(); }
  int64_t out() const override { return stage_->output_features(); }
  absl::Status Forward(int64_t step, int m, int n, const float* x, float* y) override {
    return stage_->Forward(m, n, x, y, views_, {.step = step});
  }
  absl::StatusOr<LossResult> Loss(int m, const int32_t* labels, float scale) override {
    return stage_->Loss(m, labels, scale);
  }
  absl::Status Backward(int m, const float* dy, float* dx, bool) override {
    return stage_->Backward(m, dy, dx, views_);
  }
  void ZeroGrad() override { history_->ZeroGrads(0); }
  absl::StatusOr<double> GradSumSquares(double d) override {
    return stage_->GradSumSquares(history_->grads(0), d);
  }
  absl::Status OptimizerStep(int64_t step, float scale) override {
    return history_->Update(step, *optimizer_, scale);
  }
  std::vector<float> Params() override { return *history_->Newest(); }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Stage> stage_;
  std::unique_ptr<WeightHistory> history_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<const LayerParams*> views_;  // One version, one gradient arena: never change.
};

class ExecutorUnit final : public Unit {
 public:
  ExecutorUnit(const ModelSpec& model, LayerRange range, OptimizerKind opt, DeviceKind device,
               int workers, int threads) {
    auto e = StageExecutor::Create(model, range, TestOptimizer(opt), kMaxBatch, {},
                                   {.device = device, .count = workers, .threads = threads});
    EXPECT_TRUE(e.ok()) << e.status();
    executor_ = *std::move(e);
  }
  int64_t in() const override { return executor_->input_features(); }
  int64_t out() const override { return executor_->output_features(); }
  absl::Status Forward(int64_t step, int m, int n, const float* x, float* y) override {
    return executor_->Forward(step, m, n, x, y);
  }
  absl::StatusOr<LossResult> Loss(int m, const int32_t* labels, float scale) override {
    return executor_->Loss(m, labels, scale);
  }
  absl::Status Backward(int m, const float* dy, float* dx, bool last) override {
    return executor_->Backward(m, dy, dx, last);
  }
  void ZeroGrad() override { executor_->ZeroGrad(); }
  absl::StatusOr<double> GradSumSquares(double d) override { return executor_->GradSumSquares(d); }
  absl::Status OptimizerStep(int64_t step, float scale) override {
    return executor_->OptimizerStep(step, scale);
  }
  std::vector<float> Params() override { return *executor_->Params(); }

 private:
  std::unique_ptr<StageExecutor> executor_;
};

}  // namespace

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

OptimizerSpec TestOptimizer(OptimizerKind kind) {
  OptimizerSpec o;
  o.kind = kind;
  o.lr = 0.02;
  o.weight_decay = 0.01;
  return o;
}

StepOutcome RunStep(Pipeline& units, int64_t step, const std::vector<int>& sizes) {
  StepOutcome r;
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

Pipeline Make(const ModelSpec& model, const std::vector<LayerRange>& ranges,
              const std::vector<int>& workers, OptimizerKind opt, DeviceKind device, int threads) {
  Pipeline units;
  for (size_t k = 0; k < ranges.size(); ++k) {
    if (workers[k] == 0) {
      units.push_back(std::make_unique<StageUnit>(model, ranges[k], opt, threads));
    } else {
      units.push_back(
          std::make_unique<ExecutorUnit>(model, ranges[k], opt, device, workers[k], threads));
    }
  }
  return units;
}

double RelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::abs(double{a[i]} - b[i]));
    scale = std::max(scale, std::abs(double{b[i]}));
  }
  return diff / scale;
}

}  // namespace strait::site::harness
