// Every Backend op on every built backend against the CPU backend (ggml-style). Without a second
// backend (a CPU-only build, or no GPU) the test exits with 77, which CTest counts as skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "site/backend/backend_factory.h"
#include "site/backend/counter_rng.h"
#include "site/nn/optimizer.h"
#include "site/nn/stage.h"
#include "site/pipeline/weight_history.h"

namespace strait::site {
namespace {

std::unique_ptr<Backend>& Cuda() {
  static std::unique_ptr<Backend> backend;
  return backend;
}

class CudaEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    auto b = CreateBackend(DeviceKind::kCuda, {});
    if (!b.ok()) {
      std::fprintf(stderr, "skipping: %s\n", std::string(b.status().message()).c_str());
      std::exit(77);
    }
    Cuda() = *std::move(b);
  }
  void TearDown() override { Cuda().reset(); }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new CudaEnvironment);

std::vector<float> Random(size_t n, uint64_t key, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * CounterUniform(key, i);
  return v;
}

// A tensor mirrored on the CPU backend (host memory) and on the device backend.
class Pair {
 public:
  Pair(Backend* cpu, Backend* dev, const std::vector<float>& host) : host_(host) {
    cpu_ = *DeviceBuffer::Create(cpu, 4 * std::max<size_t>(host.size(), 1));
    dev_ = *DeviceBuffer::Create(dev, 4 * std::max<size_t>(host.size(), 1));
    std::memcpy(cpu_.f32(), host.data(), 4 * host.size());
    dev->CopyToDevice(dev_.f32(), host.data(), 4 * host.size());
    dev_backend_ = dev;
  }
  float* cpu() { return cpu_.f32(); }
  float* dev() { return dev_.f32(); }
  int32_t* cpu_i() { return cpu_.i32(); }
  int32_t* dev_i() { return dev_.i32(); }
  // Device result vs CPU result, elementwise within atol + rtol * |cpu|.
  void Expect(const std::string& what, float atol = 1e-5f, float rtol = 1e-4f) {
    std::vector<float> got(host_.size());
    dev_backend_->CopyToHost(got.data(), dev_.f32(), 4 * got.size());
    ASSERT_TRUE(dev_backend_->Sync().ok());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], cpu_.f32()[i], atol + rtol * std::abs(cpu_.f32()[i]))
          << what << " [" << i << "]";
    }
  }

 private:
  std::vector<float> host_;
  DeviceBuffer cpu_, dev_;
  Backend* dev_backend_;
};

class BackendOpsTest : public ::testing::Test {
 protected:
  BackendOpsTest() : cpu_(*CreateBackend(DeviceKind::kCpu, {2, 0})), dev_(Cuda().get()) {}
  Pair Make(const std::vector<float>& v) { return Pair(cpu_.get(), dev_, v); }
  std::unique_ptr<Backend> cpu_;
  Backend* dev_;
};

TEST_F(BackendOpsTest, GemmAllTransposes) {
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int m = 37, n = 29, k = 41;
      auto a = Make(Random(m * k, 1)), b = Make(Random(k * n, 2)), c = Make(Random(m * n, 3));
      for (Backend* be : {cpu_.get(), dev_}) {
        const bool cpu = be == cpu_.get();
        be->Gemm(ta, tb, m, n, k, 0.7f, cpu ? a.cpu() : a.dev(), ta ? m : k,
                 cpu ? b.cpu() : b.dev(), tb ? k : n, 0.5f, cpu ? c.cpu() : c.dev(), n);
      }
      c.Expect("gemm", 1e-4f, 1e-4f);
      auto bc = Make(Random(5 * m * n, 4));
      auto a5 = Make(Random(5 * m * k, 5)), b5 = Make(Random(5 * k * n, 6));
      for (Backend* be : {cpu_.get(), dev_}) {
        const bool cpu = be == cpu_.get();
        be->GemmBatched(ta, tb, m, n, k, 1.0f, cpu ? a5.cpu() : a5.dev(), ta ? m : k, m * k,
                        cpu ? b5.cpu() : b5.dev(), tb ? k : n, k * n, 0.0f,
                        cpu ? bc.cpu() : bc.dev(), n, m * n, 5);
      }
      bc.Expect("gemm batched", 1e-4f, 1e-4f);
    }
  }
}

// training.precision: bf16: the device's tensor-core products against the CPU's emulation (the
// same rounding of the inputs; only the order of the fp32 sums may differ).
TEST_F(BackendOpsTest, Bf16GemmMatchesTheCpuEmulation) {
  auto cpu = CreateBackend(DeviceKind::kCpu, {.threads = 2, .precision = Precision::kBf16});
  auto dev = CreateBackend(DeviceKind::kCuda, {.precision = Precision::kBf16});
  ASSERT_TRUE(cpu.ok() && dev.ok());
  const int m = 64, n = 48, k = 96;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      auto a = Make(Random(m * k, 11)), b = Make(Random(k * n, 12)), c = Make(Random(m * n, 13));
      (*cpu)->Gemm(ta, tb, m, n, k, 0.7f, a.cpu(), ta ? m : k, b.cpu(), tb ? k : n, 0.5f, c.cpu(),
                   n);
      (*dev)->Gemm(ta, tb, m, n, k, 0.7f, a.dev(), ta ? m : k, b.dev(), tb ? k : n, 0.5f, c.dev(),
                   n);
      ASSERT_TRUE((*dev)->Sync().ok());
      c.Expect("bf16 gemm", 1e-5f, 1e-5f);
      auto a3 = Make(Random(3 * m * k, 14)), b3 = Make(Random(3 * k * n, 15));
      auto c3 = Make(Random(3 * m * n, 16));
      (*cpu)->GemmBatched(ta, tb, m, n, k, 1.0f, a3.cpu(), ta ? m : k, m * k, b3.cpu(), tb ? k : n,
                          k * n, 0.0f, c3.cpu(), n, m * n, 3);
      (*dev)->GemmBatched(ta, tb, m, n, k, 1.0f, a3.dev(), ta ? m : k, m * k, b3.dev(), tb ? k : n,
                          k * n, 0.0f, c3.dev(), n, m * n, 3);
      ASSERT_TRUE((*dev)->Sync().ok());
      c3.Expect("bf16 gemm batched", 1e-5f, 1e-5f);
    }
  }
}

// The fused attention kernels against the CPU's fused ops, which take the same steps
// (fused_attention_ test checks those against the batched products): every head width, tokens that
// end mid-tile and mid-block, causal or not, fp32 and bf16.
TEST_F(BackendOpsTest, FusedAttentionMatchesTheCpu) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    auto cpu =
        CreateBackend(DeviceKind::kCpu,
                      {.threads = 2, .precision = precision, .attention = AttentionKernel::kFused});
    auto dev = CreateBackend(DeviceKind::kCuda,
                             {.precision = precision, .attention = AttentionKernel::kFused});
    ASSERT_TRUE(cpu.ok() && dev.ok());
    for (int dh = 8; dh <= kFusedAttentionMaxHeadDim; dh += 8) {
      for (int tokens : {1, 37, 130}) {
        for (bool causal : {true, false}) {
          SCOPED_TRACE(testing::Message() << "dh " << dh << " tokens " << tokens << " causal "
                                          << causal << " bf16 " << (precision == Precision::kBf16));
          ASSERT_TRUE((*dev)->FusedAttention(dh));
          const int batch = 3;
          const size_t n = size_t{batch} * tokens * dh, rows = size_t{batch} * tokens;
          const float scale = 1.0f / std::sqrt(static_cast<float>(dh));
          auto q = Make(Random(n, 70)), k = Make(Random(n, 71)), v = Make(Random(n, 72));
          auto g = Make(Random(n, 73)), o = Make(Random(n, 74)), lse = Make(Random(rows, 75));
          auto delta = Make(Random(rows, 76)), dq = Make(Random(n, 77)), dk = Make(Random(n, 78));
          auto dv = Make(Random(n, 79));
          for (bool on_cpu : {true, false}) {
            Backend& be = on_cpu ? **cpu : **dev;
            auto at = [&](Pair& p) { return on_cpu ? p.cpu() : p.dev(); };
            be.FusedAttentionForward(batch, tokens, dh, scale, causal, at(q), at(k), at(v), at(o),
                                     at(lse));
            be.FusedAttentionBackward(batch, tokens, dh, scale, causal, at(q), at(k), at(v), at(o),
                                      at(lse), at(g), at(delta), at(dq), at(dk), at(dv));
          }
          ASSERT_TRUE((*dev)->Sync().ok());
          // bf16: a probability whose exp differs in the last bit may round to the neighbouring
          // bf16 value (2^-8 relative) on one side only.
          const float tol = precision == Precision::kFp32 ? 1e-5f : 4e-3f;
          o.Expect("o", tol, 1e-4f);
          lse.Expect("lse", 1e-5f, 1e-5f);
          dq.Expect("dq", tol, 1e-3f);
          dk.Expect("dk", tol, 1e-3f);
          dv.Expect("dv", tol, 1e-3f);
        }
      }
    }
  }
}

TEST_F(BackendOpsTest, ElementwiseAndRowOps) {
  const int rows = 70, cols = 45;
  const int64_t n = rows * cols;
  for (ActivationOp act : {ActivationOp::kNone, ActivationOp::kRelu, ActivationOp::kGelu}) {
    auto x = Make(Random(n, 10, -3, 3)), y = Make(Random(n, 11)), bias = Make(Random(cols, 12));
    cpu_->BiasActivation(rows, cols, bias.cpu(), act, x.cpu(), y.cpu());
    dev_->BiasActivation(rows, cols, bias.dev(), act, x.dev(), y.dev());
    x.Expect("bias");
    y.Expect("activation");
    auto dy = Make(Random(n, 13)), dx = Make(Random(n, 14));
    cpu_->ActivationBackward(n, act, x.cpu(), dy.cpu(), dx.cpu());
    dev_->ActivationBackward(n, act, x.dev(), dy.dev(), dx.dev());
    dx.Expect("activation backward");
  }
  auto x = Make(Random(n, 20)), out = Make(Random(cols, 21));
  cpu_->ColumnSum(rows, cols - 5, x.cpu(), cols, 1.0f, out.cpu());
  dev_->ColumnSum(rows, cols - 5, x.dev(), cols, 1.0f, out.dev());
  out.Expect("column sum", 1e-5f, 1e-5f);

  auto g = Make(Random(cols, 22)), b = Make(Random(cols, 23)), y = Make(Random(n, 24));
  auto mean = Make(Random(rows, 25)), rstd = Make(Random(rows, 26));
  cpu_->LayerNormForward(rows, cols, x.cpu(), g.cpu(), b.cpu(), y.cpu(), mean.cpu(), rstd.cpu());
  dev_->LayerNormForward(rows, cols, x.dev(), g.dev(), b.dev(), y.dev(), mean.dev(), rstd.dev());
  y.Expect("layernorm");
  mean.Expect("layernorm mean");
  rstd.Expect("layernorm rstd");
  auto dy = Make(Random(n, 27)), dx = Make(Random(n, 28)), dg = Make(Random(cols, 29)),
       db = Make(Random(cols, 30));
  cpu_->LayerNormBackward(rows, cols, x.cpu(), g.cpu(), mean.cpu(), rstd.cpu(), dy.cpu(), dx.cpu(),
                          dg.cpu(), db.cpu());
  dev_->LayerNormBackward(rows, cols, x.dev(), g.dev(), mean.dev(), rstd.dev(), dy.dev(), dx.dev(),
                          dg.dev(), db.dev());
  dx.Expect("layernorm dx");
  dg.Expect("layernorm dgamma", 1e-4f);
  db.Expect("layernorm dbeta", 1e-4f);

  for (bool causal : {false, true}) {
    auto p = Make(Random(n, 31));
    cpu_->SoftmaxRows(rows, cols, 0.3f, causal, x.cpu(), p.cpu());
    dev_->SoftmaxRows(rows, cols, 0.3f, causal, x.dev(), p.dev());
    p.Expect(causal ? "causal softmax" : "softmax");
    cpu_->SoftmaxRowsBackward(rows, cols, 0.3f, p.cpu(), dy.cpu(), dx.cpu());
    dev_->SoftmaxRowsBackward(rows, cols, 0.3f, p.dev(), dy.dev(), dx.dev());
    dx.Expect("softmax backward");
  }

  std::vector<float> label_bits(rows);
  for (int r = 0; r < rows; ++r) {
    const int32_t label = r == 3 ? -1 : r % cols;
    std::memcpy(&label_bits[r], &label, 4);
  }
  auto labels = Make(label_bits), loss = Make(Random(rows, 32)), correct = Make(Random(rows, 33));
  auto dl = Make(Random(n, 34));
  cpu_->CrossEntropy(rows, cols, x.cpu(), labels.cpu_i(), 0.1f, loss.cpu(), correct.cpu_i(),
                     dl.cpu());
  dev_->CrossEntropy(rows, cols, x.dev(), labels.dev_i(), 0.1f, loss.dev(), correct.dev_i(),
                     dl.dev());
  loss.Expect("cross-entropy loss");
  correct.Expect("cross-entropy correct", 0, 0);
  dl.Expect("cross-entropy gradient");

  auto d = Make(Random(n, 35));
  cpu_->Dropout(n, 0.3f, 99, 12345, x.cpu(), d.cpu());
  dev_->Dropout(n, 0.3f, 99, 12345, x.dev(), d.dev());
  d.Expect("dropout", 0, 0);
  cpu_->Axpy(n, 0.5f, x.cpu(), d.cpu());
  dev_->Axpy(n, 0.5f, x.dev(), d.dev());
  d.Expect("axpy", 0, 0);
  cpu_->Axpby(n, 3.0f, x.cpu(), -2.0f, d.cpu());
  dev_->Axpby(n, 3.0f, x.dev(), -2.0f, d.dev());
  d.Expect("axpby", 0, 0);
  cpu_->Copy2D(rows - 1, 7, x.cpu() + 3, cols, d.cpu() + 1, 9);
  dev_->Copy2D(rows - 1, 7, x.dev() + 3, cols, d.dev() + 1, 9);
  cpu_->Copy2D(4, 5, x.cpu(), 0, d.cpu() + 2000, 11);
  dev_->Copy2D(4, 5, x.dev(), 0, d.dev() + 2000, 11);
  d.Expect("copy2d", 0, 0);
  cpu_->Fill(d.cpu() + 5, 100, 2.5f);
  dev_->Fill(d.dev() + 5, 100, 2.5f);
  d.Expect("fill", 0, 0);
  EXPECT_NEAR(dev_->SumSquares(n, x.dev()), cpu_->SumSquares(n, x.cpu()), 1e-9 * n);
  EXPECT_EQ(dev_->SumSquares(n, x.dev()), dev_->SumSquares(n, x.dev()));  // deterministic
}

TEST_F(BackendOpsTest, Embedding) {
  const int rows = 300, dim = 40, vocab = 50;
  std::vector<float> id_values(rows);
  for (int r = 0; r < rows; ++r) id_values[r] = r == 7 ? -1.0f : r == 9 ? vocab : (r * 37) % vocab;
  auto ids = Make(id_values), table = Make(Random(vocab * dim, 50)),
       y = Make(Random(rows * dim, 51));
  cpu_->EmbeddingLookup(rows, dim, vocab, ids.cpu(), table.cpu(), y.cpu());
  dev_->EmbeddingLookup(rows, dim, vocab, ids.dev(), table.dev(), y.dev());
  y.Expect("embedding lookup", 0, 0);
  auto dy = Make(Random(rows * dim, 52)), dtable = Make(Random(vocab * dim, 53));
  cpu_->EmbeddingBackward(rows, dim, vocab, ids.cpu(), dy.cpu(), dtable.cpu());
  dev_->EmbeddingBackward(rows, dim, vocab, ids.dev(), dy.dev(), dtable.dev());
  dtable.Expect("embedding backward", 0, 0);  // Rows added in the same order: the same bits.
}

TEST_F(BackendOpsTest, LayoutOps) {
  const int n = 3, c = 2, h = 8, w = 12, p = 4;
  auto img = Make(Random(n * c * h * w, 40)), patches = Make(Random(n * c * h * w, 41));
  cpu_->ExtractPatches(n, c, h, w, p, img.cpu(), patches.cpu());
  dev_->ExtractPatches(n, c, h, w, p, img.dev(), patches.dev());
  patches.Expect("patches", 0, 0);
  const int tokens = 5, heads = 3, dh = 4, ldx = 3 * heads * dh;
  auto x = Make(Random(n * tokens * ldx, 42)), y = Make(Random(n * heads * tokens * dh, 43));
  cpu_->HeadsToBatch(n, tokens, heads, dh, x.cpu() + 12, ldx, y.cpu());
  dev_->HeadsToBatch(n, tokens, heads, dh, x.dev() + 12, ldx, y.dev());
  y.Expect("heads to batch", 0, 0);
  cpu_->BatchToHeads(n, tokens, heads, dh, y.cpu(), x.cpu(), ldx);
  dev_->BatchToHeads(n, tokens, heads, dh, y.dev(), x.dev(), ldx);
  x.Expect("batch to heads", 0, 0);
}

TEST_F(BackendOpsTest, Optimizers) {
  const int64_t n = 5000;
  auto p = Make(Random(n, 50)), g = Make(Random(n, 51)), m = Make(Random(n, 52, 0, 1)),
       v = Make(Random(n, 53, 0, 1));
  cpu_->SgdUpdate(n, 0.1f, 0.9f, 0.01f, 0.5f, p.cpu(), g.cpu(), m.cpu());
  dev_->SgdUpdate(n, 0.1f, 0.9f, 0.01f, 0.5f, p.dev(), g.dev(), m.dev());
  p.Expect("sgd param");
  m.Expect("sgd velocity");
  cpu_->AdamWUpdate(n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.19f, 0.002f, 0.7f, p.cpu(), g.cpu(),
                    m.cpu(), v.cpu());
  dev_->AdamWUpdate(n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.19f, 0.002f, 0.7f, p.dev(), g.dev(),
                    m.dev(), v.dev());
  p.Expect("adamw param");
  m.Expect("adamw m");
  v.Expect("adamw v");
}

// Whole layers: one training step of a small ViT (every layer kind, dropout on) on both backends,
// the stage driven with its weight history and optimizer as a StageExecutor's worker drives it.
TEST_F(BackendOpsTest, VitStageStepMatchesCpu) {
  ModelSpec model;
  model.family = ModelFamily::kVit;
  model.vit = {1, 8, 8, 4, 16, 2, 2, 32, 5, 0.1f};
  OptimizerSpec opt;
  opt.lr = 1e-2;
  const std::vector<float> x = Random(6 * 64, 60);
  const std::vector<int32_t> labels = {0, 1, 2, 3, 4, 0};
  // The logits and the gradient of one step on `backend`.
  auto step = [&](Backend* backend, std::vector<float>* logits) {
    auto stage = *Stage::Create(model, {0, 4}, 6, backend);
    auto history = *site::WeightHistory::Create(*stage, {});
    auto optimizer = *Optimizer::Create(opt, stage->param_count(), backend);
    std::vector<const LayerParams*> weights;
    for (const LayerParams& v : **history->Views(site::kNewestWeights, 0, "test")) {
      weights.push_back(&v);
    }
    history->ZeroGrads(0);
    EXPECT_TRUE(stage->Forward(0, 6, x.data(), logits->data(), weights).ok());
    EXPECT_TRUE(stage->Loss(0, labels.data(), 1.0f / 6).ok());
    EXPECT_TRUE(stage->Backward(0, nullptr, nullptr, weights).ok());
    EXPECT_TRUE(history->Update(1, *optimizer, 1.0f).ok());
    return *history->Grads(0);
  };
  std::vector<float> cpu_logits(6 * 5), dev_logits(6 * 5);
  const std::vector<float> cpu_grads = step(cpu_.get(), &cpu_logits);
  const std::vector<float> dev_grads = step(dev_, &dev_logits);
  for (size_t i = 0; i < cpu_logits.size(); ++i) EXPECT_NEAR(dev_logits[i], cpu_logits[i], 1e-4);
  for (size_t i = 0; i < cpu_grads.size(); ++i) {
    ASSERT_NEAR(dev_grads[i], cpu_grads[i], 1e-5 + 1e-3 * std::abs(cpu_grads[i])) << "grad " << i;
  }
}

// A GPT step (causal attention, heads of 32 floats, a context past two key tiles) on the device
// with each attention kernel, against the CPU's batched products.
TEST_F(BackendOpsTest, GptStageStepMatchesCpuWithEitherAttention) {
  ModelSpec model;
  model.family = ModelFamily::kGpt;
  model.gpt.vocab = 11;
  model.gpt.context = 70;
  model.gpt.dim = 64;
  model.gpt.depth = 2;
  model.gpt.heads = 2;
  model.gpt.mlp_dim = 96;
  OptimizerSpec opt;
  opt.lr = 1e-2;
  const int n = 3, rows = n * 70;
  std::vector<float> x(rows);
  std::vector<int32_t> labels(rows);
  for (int i = 0; i < rows; ++i) x[i] = static_cast<float>(i * 7 % 11), labels[i] = i * 5 % 11;
  auto step = [&](Backend* backend, std::vector<float>* logits) {
    auto stage = *Stage::Create(model, {0, model.NumLayers()}, n, backend);
    auto history = *site::WeightHistory::Create(*stage, {});
    std::vector<const LayerParams*> weights;
    for (const LayerParams& v : **history->Views(site::kNewestWeights, 0, "test")) {
      weights.push_back(&v);
    }
    history->ZeroGrads(0);
    EXPECT_TRUE(stage->Forward(0, n, x.data(), logits->data(), weights).ok());
    EXPECT_TRUE(stage->Loss(0, labels.data(), 1.0f / rows).ok());
    EXPECT_TRUE(stage->Backward(0, nullptr, nullptr, weights).ok());
    return *history->Grads(0);
  };
  std::vector<float> cpu_logits(rows * 11);
  const std::vector<float> cpu_grads = step(cpu_.get(), &cpu_logits);
  for (AttentionKernel attention : {AttentionKernel::kFused, AttentionKernel::kBatched}) {
    SCOPED_TRACE(attention == AttentionKernel::kFused ? "fused" : "batched");
    auto dev = CreateBackend(DeviceKind::kCuda, {.attention = attention});
    ASSERT_TRUE(dev.ok());
    EXPECT_EQ((*dev)->FusedAttention(32), attention == AttentionKernel::kFused);
    std::vector<float> dev_logits(rows * 11);
    const std::vector<float> dev_grads = step(dev->get(), &dev_logits);
    for (size_t i = 0; i < cpu_logits.size(); ++i) {
      ASSERT_NEAR(dev_logits[i], cpu_logits[i], 1e-4) << "logit " << i;
    }
    for (size_t i = 0; i < cpu_grads.size(); ++i) {
      ASSERT_NEAR(dev_grads[i], cpu_grads[i], 1e-5 + 1e-3 * std::abs(cpu_grads[i])) << "grad " << i;
    }
  }
}

}  // namespace
}  // namespace strait::site
