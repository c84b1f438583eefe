// Every Backend op on every built backend against the CPU backend (ggml-style). Without a second
// backend (a CPU-only build, or no GPU) the test exits with 77, which CTest counts as skipped.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/chain_spec.h"
#include "site/backend/backend_factory.h"
#include "site/backend/counter_rng.h"
#include "site/backend/cpu/f32_views.h"
#include "site/backend/op_math.h"
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

// A tensor of type `dtype` mirrored on the CPU backend and on the device backend; compared as
// floats.
class TypedPair {
 public:
  TypedPair(Backend* cpu, Backend* dev, const std::vector<float>& host, DType dtype)
      : n_(host.size()), dtype_(dtype), dev_backend_(dev) {
    const size_t bytes = SizeOf(dtype) * std::max<size_t>(n_, 1);
    cpu_ = *DeviceBuffer::Create(cpu, bytes);
    dev_ = *DeviceBuffer::Create(dev, bytes);
    cpu->Convert(n_, host.data(), this->cpu());
    DeviceBuffer staging = *DeviceBuffer::Create(dev, 4 * std::max<size_t>(n_, 1));
    dev->CopyToDevice(staging.data(), host.data(), 4 * n_);
    dev->Convert(n_, staging.f32(), this->dev());
    EXPECT_TRUE(dev->Sync().ok());
  }
  TypedPtr cpu() { return cpu_.typed(dtype_); }
  TypedPtr dev() { return dev_.typed(dtype_); }
  std::vector<float> DeviceValues() {
    DeviceBuffer staging = *DeviceBuffer::Create(dev_backend_, 4 * std::max<size_t>(n_, 1));
    dev_backend_->Convert(n_, dev(), staging.f32());
    std::vector<float> got(n_);
    dev_backend_->CopyToHost(got.data(), staging.data(), 4 * n_);
    EXPECT_TRUE(dev_backend_->Sync().ok());
    return got;
  }
  void Expect(const std::string& what, float atol, float rtol) {
    const std::vector<float> got = DeviceValues();
    std::vector<float> want(n_);
    cpu::Widen(n_, cpu(), want.data());
    for (size_t i = 0; i < n_; ++i) {
      ASSERT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << what << " [" << i << "]";
    }
  }

 private:
  size_t n_;
  DType dtype_;
  Backend* dev_backend_;
  DeviceBuffer cpu_, dev_;
};

class BackendOpsTest : public ::testing::Test {
 protected:
  BackendOpsTest() : cpu_(*CreateBackend(DeviceKind::kCpu, {2, 0})), dev_(Cuda().get()) {}
  Pair Make(const std::vector<float>& v) { return Pair(cpu_.get(), dev_, v); }
  TypedPair MakeTyped(const std::vector<float>& v, DType t) {
    return TypedPair(cpu_.get(), dev_, v, t);
  }
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

// The fused attention against the CPU's fused ops (fused_attention_test checks those against the
// batched products): f32 through the CUDA-core kernels (every head width, tokens that end mid-tile
// and mid-block, causal or not), bf16 through cuDNN (the widths a GPT uses).
TEST_F(BackendOpsTest, FusedAttentionMatchesTheCpu) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    const bool bf16 = precision == Precision::kBf16;
    auto cpu =
        CreateBackend(DeviceKind::kCpu,
                      {.threads = 2, .precision = precision, .attention = AttentionKernel::kFused});
    auto dev = CreateBackend(DeviceKind::kCuda,
                             {.precision = precision, .attention = AttentionKernel::kFused});
    ASSERT_TRUE(cpu.ok() && dev.ok());
    const DType act = (*dev)->activation_dtype();
    for (int dh :
         bf16 ? std::vector<int>{64, 128} : std::vector<int>{8, 16, 24, 32, 40, 48, 56, 64}) {
      for (int tokens : {2, 37, 130}) {
        for (bool causal : {true, false}) {
          SCOPED_TRACE(testing::Message() << "dh " << dh << " tokens " << tokens << " causal "
                                          << causal << " bf16 " << bf16);
          if (!(*dev)->FusedAttention(dh)) {
            ADD_FAILURE() << (*dev)->Name() << " has no fused attention for heads of " << dh;
            return;
          }
          AttentionDims d;
          d.n = 3, d.tokens = tokens, d.heads = 2, d.dh = dh;
          d.scale = 1.0f / std::sqrt(static_cast<float>(dh));
          d.causal = causal;
          const size_t qkv_n = d.rows() * 3 * d.width(), out_n = d.rows() * d.width();
          const size_t rows = d.queries();
          // Inputs hold bf16 values under bf16 (stored bf16 on the device, f32 on the CPU).
          auto values = [&](size_t n, uint64_t key) {
            std::vector<float> v = Random(n, key);
            if (bf16)
              for (float& x : v) x = RoundToBf16(x);
            return v;
          };
          auto qkv = MakeTyped(values(qkv_n, 70), act), g = MakeTyped(values(out_n, 73), act);
          auto o = MakeTyped(Random(out_n, 74), act), dqkv = MakeTyped(Random(qkv_n, 77), act);
          auto lse = Make(Random(rows, 75)), delta = Make(Random(rows, 76));
          for (bool on_cpu : {true, false}) {
            Backend& be = on_cpu ? **cpu : **dev;
            auto at = [&](TypedPair& p) { return on_cpu ? p.cpu() : p.dev(); };
            be.FusedAttentionForward(d, at(qkv), at(o), on_cpu ? lse.cpu() : lse.dev());
            be.FusedAttentionBackward(d, at(qkv), at(o), on_cpu ? lse.cpu() : lse.dev(), at(g),
                                      at(dqkv), on_cpu ? delta.cpu() : delta.dev());
          }
          ASSERT_TRUE((*dev)->Sync().ok());
          // bf16: cuDNN tiles and rounds the probabilities its own way; each output is a sum of
          // products of bf16 values, so it matches to a few bf16 ulps of its scale.
          const float tol = bf16 ? 2e-2f : 1e-5f;
          o.Expect("o", tol, bf16 ? 2e-2f : 1e-4f);
          lse.Expect("lse", bf16 ? 1e-2f : 1e-5f, 1e-5f);
          dqkv.Expect("dqkv", tol, bf16 ? 3e-2f : 1e-3f);
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
  auto dl = Make(Random(n, 34, -4, 4));
  cpu_->ClassifierLoss(rows, cols, dl.cpu(), labels.cpu_i(), 0.1f, loss.cpu(), correct.cpu_i());
  dev_->ClassifierLoss(rows, cols, dl.dev(), labels.dev_i(), 0.1f, loss.dev(), correct.dev_i());
  loss.Expect("classifier loss");
  correct.Expect("classifier correct", 0, 0);
  dl.Expect("classifier gradient");

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

// bf16 storage: the device's kernels against the CPU's emulation, both on bf16 tensors. An output
// is the f32 result rounded once, so where the two f32 results differ in their last bits the
// stored values may differ by one bf16 step (2^-8 relative): the tolerances below.
TEST_F(BackendOpsTest, Bf16RowAndFusedOpsMatchTheCpuEmulation) {
  auto cpu = CreateBackend(DeviceKind::kCpu, {.threads = 2, .precision = Precision::kBf16});
  auto dev = CreateBackend(DeviceKind::kCuda, {.precision = Precision::kBf16});
  ASSERT_TRUE(cpu.ok() && dev.ok());
  Backend& c = **cpu;
  Backend& d = **dev;
  const DType b = DType::kBf16;
  auto typed = [&](const std::vector<float>& v) { return TypedPair(&c, &d, v, b); };
  auto f32 = [&](const std::vector<float>& v) { return Pair(&c, &d, v); };
  constexpr float kUlp = 1.0f / 128;  // two bf16 steps, relative
  for (int dim : {40, 768, 1600}) {   // a scalar row, a row in registers, a wide row
    SCOPED_TRACE(testing::Message() << "dim " << dim);
    const int rows = 300;
    const int64_t n = int64_t{rows} * dim;
    auto x = typed(Random(n, 80, -3, 3)), branch = typed(Random(n, 81)), r = typed(Random(n, 82));
    auto y = typed(Random(n, 83));
    auto g = f32(Random(dim, 84)), beta = f32(Random(dim, 85));
    auto mean = f32(Random(rows, 86)), rstd = f32(Random(rows, 87));
    c.ResidualLayerNormForward(rows, dim, x.cpu(), branch.cpu(), r.cpu(), g.cpu(), beta.cpu(),
                               y.cpu(), mean.cpu(), rstd.cpu());
    d.ResidualLayerNormForward(rows, dim, x.dev(), branch.dev(), r.dev(), g.dev(), beta.dev(),
                               y.dev(), mean.dev(), rstd.dev());
    r.Expect("residual", 0, 0);  // one rounding of an exact sum of two bf16 values
    y.Expect("residual layernorm", 1e-3f, kUlp);
    mean.Expect("residual layernorm mean", 1e-5f, 1e-4f);
    auto dy = typed(Random(n, 88)), dx = typed(Random(n, 89));
    auto dg = f32(Random(dim, 90)), db = f32(Random(dim, 91));
    c.LayerNormBackward(rows, dim, r.cpu(), g.cpu(), mean.cpu(), rstd.cpu(), dy.cpu(), dx.cpu(),
                        dg.cpu(), db.cpu());
    d.LayerNormBackward(rows, dim, r.dev(), g.dev(), mean.dev(), rstd.dev(), dy.dev(), dx.dev(),
                        dg.dev(), db.dev());
    dx.Expect("layernorm dx", 1e-3f, kUlp);
    dg.Expect("layernorm dgamma", 1e-3f, 1e-4f);
    db.Expect("layernorm dbeta", 1e-3f, 1e-4f);
    auto sums = f32(Random(dim, 92));
    c.ColumnSum(rows, dim, dy.cpu(), dim, 1.0f, sums.cpu());
    d.ColumnSum(rows, dim, dy.dev(), dim, 1.0f, sums.dev());
    sums.Expect("column sum", 1e-4f, 1e-4f);
  }
  // The fused classifier on a vocabulary of GPT-2's size, in place on bf16 logits.
  {
    const int rows = 7, classes = 50257;
    std::vector<float> label_bits(rows);
    for (int r = 0; r < rows; ++r) {
      const int32_t label = r == 2 ? -1 : (r * 7919) % classes;
      std::memcpy(&label_bits[r], &label, 4);
    }
    auto logits = typed(Random(int64_t{rows} * classes, 93, -6, 6));
    auto labels = f32(label_bits), loss = f32(Random(rows, 94)), correct = f32(Random(rows, 95));
    c.ClassifierLoss(rows, classes, logits.cpu(), labels.cpu_i(), 0.5f, loss.cpu(),
                     correct.cpu_i());
    d.ClassifierLoss(rows, classes, logits.dev(), labels.dev_i(), 0.5f, loss.dev(),
                     correct.dev_i());
    loss.Expect("classifier loss", 1e-4f, 1e-5f);
    correct.Expect("classifier correct", 0, 0);
    logits.Expect("classifier gradient", 1e-7f, kUlp);
  }
  // Products with their epilogues: an MLP's fc1 forward (bias, GELU, the pre-activation kept),
  // fc2's input gradient through GELU with fc1's bias gradient, and a weight gradient (bf16
  // operands, f32 accumulator, beta 1).
  const int m = 256, k = 192, f = 384;
  auto xn = typed(Random(m * k, 96)), w1 = typed(Random(f * k, 97));
  auto b1 = f32(Random(f, 98));
  auto h = typed(Random(m * f, 99)), act = typed(Random(m * f, 100));
  GemmEpilogue forward_c, forward_d;
  forward_c.bias = b1.cpu(), forward_d.bias = b1.dev();
  forward_c.act = forward_d.act = ActivationOp::kGelu;
  forward_c.pre = h.cpu(), forward_d.pre = h.dev();
  c.Gemm(false, true, m, f, k, 1.0f, xn.cpu(), k, w1.cpu(), k, 0.0f, act.cpu(), f, forward_c);
  d.Gemm(false, true, m, f, k, 1.0f, xn.dev(), k, w1.dev(), k, 0.0f, act.dev(), f, forward_d);
  h.Expect("fc1 pre-activation", 1e-3f, kUlp);
  act.Expect("fc1 gelu", 1e-3f, kUlp);
  auto dy = typed(Random(m * k, 101)), w2 = typed(Random(k * f, 102)),
       dh = typed(Random(m * f, 103));
  auto h_same = typed(Random(m * f, 107, -3, 3));  // one pre-activation for both sides
  auto db1 = f32(Random(f, 104));
  GemmEpilogue backward_c, backward_d;
  backward_c.grad_of = backward_d.grad_of = ActivationOp::kGelu;
  backward_c.act_input = h_same.cpu(), backward_d.act_input = h_same.dev();
  backward_c.bias_grad = db1.cpu(), backward_d.bias_grad = db1.dev();
  const std::vector<float> db1_before(db1.cpu(), db1.cpu() + f);
  c.Gemm(false, false, m, f, k, 1.0f, dy.cpu(), k, w2.cpu(), f, 0.0f, dh.cpu(), f, backward_c);
  d.Gemm(false, false, m, f, k, 1.0f, dy.dev(), k, w2.dev(), f, 0.0f, dh.dev(), f, backward_d);
  // cuBLASLt's GELU-backward epilogue beside a bf16 C (what the device runs) is less exact than one
  // rounding: lt_matmul_check on an H200 measured errors of 4.6e-3 of the largest |C| where one
  // rounding makes 2e-3. So beyond the output's rounding each value may differ by 2^-8 of the
  // product itself, and a bias gradient (the column sums of C) by the sum of those allowances.
  {
    auto product = f32(std::vector<float>(m * f));
    c.Gemm(false, false, m, f, k, 1.0f, dy.cpu(), k, w2.cpu(), f, 0.0f, product.cpu(), f);
    const std::vector<float> got = dh.DeviceValues();
    std::vector<float> want(got.size()), column_allowance(f, 0.0f);
    cpu::Widen(want.size(), dh.cpu(), want.data());
    for (size_t i = 0; i < got.size(); ++i) {
      const float allowance = std::abs(product.cpu()[i]) / 256;
      column_allowance[i % f] += allowance;
      ASSERT_NEAR(got[i], want[i], 1e-3f + kUlp * std::abs(want[i]) + allowance)
          << "gelu backward [" << i << "]";
    }
    std::vector<float> got_db(f);
    d.CopyToHost(got_db.data(), db1.dev(), sizeof(float) * f);
    ASSERT_TRUE(d.Sync().ok());
    for (int j = 0; j < f; ++j) {
      const float sum = db1.cpu()[j] - db1_before[j];
      ASSERT_NEAR(got_db[j], db1.cpu()[j], 1e-3f + 1e-3f * std::abs(sum) + column_allowance[j])
          << "fc1 bias gradient [" << j << "]";
    }
  }
  // A weight gradient on the same bf16 inputs on both sides (dh above differs by its epilogue).
  auto dw = f32(Random(f * k, 105));
  auto dh_same = typed(Random(m * f, 106));
  c.Gemm(true, false, f, k, m, 1.0f, dh_same.cpu(), f, xn.cpu(), k, 1.0f, dw.cpu(), k);
  d.Gemm(true, false, f, k, m, 1.0f, dh_same.dev(), f, xn.dev(), k, 1.0f, dw.dev(), k);
  dw.Expect("weight gradient", 1e-3f, 1e-3f);
}

// LLaMA's ops in f32 and bf16: RMSNorm (a scalar row and a wide one), rotary positions on a
// strided slice of rows and back, SwiGLU, and the key/value heads of grouped-query attention.
TEST_F(BackendOpsTest, LlamaOps) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    const bool bf16 = precision == Precision::kBf16;
    SCOPED_TRACE(bf16 ? "bf16" : "f32");
    auto cpu = CreateBackend(DeviceKind::kCpu, {.threads = 2, .precision = precision});
    auto dev = CreateBackend(DeviceKind::kCuda, {.precision = precision});
    ASSERT_TRUE(cpu.ok() && dev.ok());
    Backend& c = **cpu;
    Backend& d = **dev;
    const DType t = bf16 ? DType::kBf16 : DType::kF32;
    auto typed = [&](const std::vector<float>& v) { return TypedPair(&c, &d, v, t); };
    auto f32 = [&](const std::vector<float>& v) { return Pair(&c, &d, v); };
    const float rtol = bf16 ? 1.0f / 128 : 1e-5f, atol = bf16 ? 1e-3f : 1e-5f;
    for (int dim : {40, 1600}) {
      const int rows = 70;
      const int64_t n = int64_t{rows} * dim;
      auto x = typed(Random(n, 200, -3, 3)), y = typed(Random(n, 201));
      auto g = f32(Random(dim, 202)), rstd = f32(Random(rows, 203));
      c.RmsNormForward(rows, dim, 1e-5f, x.cpu(), g.cpu(), y.cpu(), rstd.cpu());
      d.RmsNormForward(rows, dim, 1e-5f, x.dev(), g.dev(), y.dev(), rstd.dev());
      y.Expect("rmsnorm", atol, rtol);
      rstd.Expect("rmsnorm rstd", 1e-5f, 1e-4f);
      auto dy = typed(Random(n, 204)), dx = typed(Random(n, 205));
      auto dg = f32(Random(dim, 206));
      c.RmsNormBackward(rows, dim, x.cpu(), g.cpu(), rstd.cpu(), dy.cpu(), dx.cpu(), dg.cpu());
      d.RmsNormBackward(rows, dim, x.dev(), g.dev(), rstd.dev(), dy.dev(), dx.dev(), dg.dev());
      dx.Expect("rmsnorm dx", atol, rtol);
      dg.Expect("rmsnorm dgamma", 1e-3f, 1e-4f);
    }
    const int rows = 2 * 37, tokens = 37, heads = 4, kv_heads = 2, dh = 16;
    const int64_t q = heads * dh, width = (heads + 2 * kv_heads) * dh;
    auto qkv = typed(Random(rows * width, 210));
    for (bool inverse : {false, true}) {  // the keys only: a slice at column q of rows of `width`
      c.Rotary(rows, tokens, kv_heads, dh, 500.0, inverse, qkv.cpu() + q, width);
      d.Rotary(rows, tokens, kv_heads, dh, 500.0, inverse, qkv.dev() + q, width);
      qkv.Expect(inverse ? "rotary back" : "rotary", atol, rtol);
    }
    // A copy of the key/value heads: exact, on inputs equal on both sides (after the rotary
    // above they may differ in their last bits).
    auto kv = typed(Random(rows * width, 215));
    auto full = typed(Random(rows * 3 * q, 211));
    c.RepeatKvHeads(rows, heads, kv_heads, dh, kv.cpu(), full.cpu());
    d.RepeatKvHeads(rows, heads, kv_heads, dh, kv.dev(), full.dev());
    full.Expect("repeat kv heads", 0, 0);
    c.SumKvHeads(rows, heads, kv_heads, dh, full.cpu(), kv.cpu());
    d.SumKvHeads(rows, heads, kv_heads, dh, full.dev(), kv.dev());
    kv.Expect("sum kv heads", atol, rtol);
    const int f = 96;
    auto gu = typed(Random(rows * 2 * f, 212, -4, 4)), h = typed(Random(rows * f, 213));
    c.SwiGluForward(rows, f, gu.cpu(), h.cpu());
    d.SwiGluForward(rows, f, gu.dev(), h.dev());
    h.Expect("swiglu", atol, rtol);
    auto dgu = typed(Random(rows * 2 * f, 214));
    c.SwiGluBackward(rows, f, gu.cpu(), h.cpu(), dgu.cpu());
    d.SwiGluBackward(rows, f, gu.dev(), h.dev(), dgu.dev());
    dgu.Expect("swiglu backward", atol, rtol);
  }
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
  cpu_->SgdUpdate(n, 0.1f, 0.9f, 0.01f, 0.5f, p.cpu(), g.cpu(), m.cpu(), nullptr);
  dev_->SgdUpdate(n, 0.1f, 0.9f, 0.01f, 0.5f, p.dev(), g.dev(), m.dev(), nullptr);
  p.Expect("sgd param");
  m.Expect("sgd velocity");
  auto copy = MakeTyped(Random(n, 54), DType::kBf16);
  cpu_->AdamWUpdate(n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.19f, 0.002f, 0.7f, p.cpu(), g.cpu(),
                    m.cpu(), v.cpu(), copy.cpu());
  dev_->AdamWUpdate(n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.19f, 0.002f, 0.7f, p.dev(), g.dev(),
                    m.dev(), v.dev(), copy.dev());
  copy.Expect("adamw bf16 copy", 0, 4e-3f);
  p.Expect("adamw param");
  m.Expect("adamw m");
  v.Expect("adamw v");
}

// A link codec's value stage on the device (a GPU site's boundary tensors): the payload of an f32
// or a bf16 tensor is the CPU's byte for byte, stochastic rounding's seed included, and decoding
// it gives the CPU's values in either type.
TEST_F(BackendOpsTest, CodecValueStagesMatchTheCpuByteForByte) {
  using compression::StageKind;
  const int64_t n = 3000;  // not a multiple of a block
  const std::vector<compression::StageSpec> stages = {
      {.kind = StageKind::kNone},
      {.kind = StageKind::kFp16},
      {.kind = StageKind::kBf16},
      {.kind = StageKind::kInt8},
      {.kind = StageKind::kInt8, .block_size = 64, .stochastic = true},
      {.kind = StageKind::kInt4},
      {.kind = StageKind::kInt4, .block_size = 112, .stochastic = true}};
  for (DType dtype : {DType::kF32, DType::kBf16}) {
    auto x = MakeTyped(Random(n, 60, -3, 3), dtype);
    for (const compression::StageSpec& stage : stages) {
      SCOPED_TRACE(absl::StrCat(ToString(dtype), " ", compression::StageName(stage.kind),
                                stage.stochastic ? ":sr" : ""));
      std::vector<uint8_t> want, got;
      ASSERT_TRUE(cpu_->EncodeValues(stage, 0x5eed + 7, x.cpu(), n, &want).ok());
      ASSERT_TRUE(dev_->EncodeValues(stage, 0x5eed + 7, x.dev(), n, &got).ok());
      ASSERT_EQ(got, want);
      auto back = MakeTyped(std::vector<float>(n), dtype);
      ASSERT_TRUE(cpu_->DecodeValues(stage, want, n, back.cpu()).ok());
      ASSERT_TRUE(dev_->DecodeValues(stage, want, n, back.dev()).ok());
      back.Expect("decoded", 0, 0);
      EXPECT_FALSE(
          dev_->DecodeValues(stage, absl::MakeConstSpan(want).subspan(1), n, back.dev()).ok());
    }
  }
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
// with each attention kernel, against the CPU's batched products: f32, and bf16 against the CPU's
// emulation of it. The bf16 tolerance: every stored activation is rounded (2^-9 relative), and a
// rounding that differs between the two backends (their f32 sums differ in order) moves a value by
// one bf16 step (2^-8); through two blocks and the head such steps add up to about 1% of a
// logit's scale and a few % of a gradient's, which the tolerances allow with a factor of 2.
// A whole language model's step (logits and every gradient) on the device against the CPU: gpt,
// and llama with grouped-query attention.
class LanguageModelStepTest : public BackendOpsTest,
                              public ::testing::WithParamInterface<ModelFamily> {};

TEST_P(LanguageModelStepTest, MatchesCpuWithEitherAttention) {
  ModelSpec model;
  model.family = GetParam();
  model.gpt.vocab = 11;
  model.gpt.context = 70;
  model.gpt.dim = 64;
  model.gpt.depth = 2;
  model.gpt.heads = 2;
  model.gpt.kv_heads = model.family == ModelFamily::kLlama ? 1 : 2;
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
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    const bool bf16 = precision == Precision::kBf16;
    auto cpu = CreateBackend(DeviceKind::kCpu, {.threads = 2, .precision = precision});
    ASSERT_TRUE(cpu.ok());
    std::vector<float> cpu_logits(rows * 11);
    const std::vector<float> cpu_grads = step(cpu->get(), &cpu_logits);
    float logit_scale = 0.0f, grad_scale = 0.0f;
    for (float v : cpu_logits) logit_scale = std::max(logit_scale, std::abs(v));
    for (float v : cpu_grads) grad_scale = std::max(grad_scale, std::abs(v));
    const double logit_tol = bf16 ? 2e-2 * logit_scale : 1e-4;
    const double grad_atol = bf16 ? 5e-2 * grad_scale : 1e-5, grad_rtol = bf16 ? 0.1 : 1e-3;
    for (AttentionKernel attention : {AttentionKernel::kFused, AttentionKernel::kBatched}) {
      SCOPED_TRACE(testing::Message()
                   << (attention == AttentionKernel::kFused ? "fused" : "batched")
                   << (bf16 ? " bf16" : " f32"));
      auto dev = CreateBackend(DeviceKind::kCuda, {.precision = precision, .attention = attention});
      ASSERT_TRUE(dev.ok());
      EXPECT_EQ((*dev)->FusedAttention(32), attention == AttentionKernel::kFused);
      std::vector<float> dev_logits(rows * 11);
      const std::vector<float> dev_grads = step(dev->get(), &dev_logits);
      for (size_t i = 0; i < cpu_logits.size(); ++i) {
        ASSERT_NEAR(dev_logits[i], cpu_logits[i], logit_tol) << "logit " << i;
      }
      for (size_t i = 0; i < cpu_grads.size(); ++i) {
        ASSERT_NEAR(dev_grads[i], cpu_grads[i], grad_atol + grad_rtol * std::abs(cpu_grads[i]))
            << "grad " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LanguageModelStepTest,
                         ::testing::Values(ModelFamily::kGpt, ModelFamily::kLlama),
                         [](const auto& info) { return std::string(ToString(info.param)); });

}  // namespace
}  // namespace strait::site
