// Typed storage on the CPU backend (site/backend/dtype.h), the reference for the CUDA backend: a
// bf16 tensor holds the nearest bf16 value, an op on bf16 tensors is the f32 op on their values
// with each stored output rounded once, and every fused op equals the composition of the plain ops
// it replaces (rounding where the composition stores).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "compression/codec_chain.h"
#include "site/backend/counter_rng.h"
#include "site/backend/cpu/cpu_backend.h"
#include "site/backend/dtype.h"
#include "site/backend/op_math.h"

namespace strait::site {
namespace {

std::vector<float> Random(size_t n, uint64_t key, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * CounterUniform(key, i);
  return v;
}

// A bf16 tensor in host memory (the CPU backend's memory).
struct Bf16 {
  std::vector<uint16_t> bits;
  explicit Bf16(const std::vector<float>& v) : bits(v.size()) {
    for (size_t i = 0; i < v.size(); ++i) bits[i] = Bf16Bits(v[i]);
  }
  explicit Bf16(size_t n) : bits(n, Bf16Bits(std::numeric_limits<float>::quiet_NaN())) {}
  TypedPtr ptr() { return TypedPtr(bits.data(), DType::kBf16); }
  std::vector<float> values() const {
    std::vector<float> v(bits.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = Bf16Value(bits[i]);
    return v;
  }
};

std::vector<float> Rounded(std::vector<float> v) {
  for (float& x : v) x = RoundToBf16(x);
  return v;
}

TEST(TypedOpsTest, Bf16BitsRoundToNearestEven) {
  EXPECT_EQ(Bf16Bits(1.0f), 0x3f80);
  EXPECT_EQ(Bf16Bits(0.1f), 0x3dcd);                               // 0x3dcccccd rounds up
  EXPECT_EQ(Bf16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);        // a tie goes to even
  EXPECT_EQ(Bf16Bits(std::numeric_limits<float>::max()), 0x7f80);  // infinity
  EXPECT_TRUE(std::isnan(Bf16Value(Bf16Bits(std::numeric_limits<float>::quiet_NaN()))));
  for (float x : Random(1000, 1, -100.0f, 100.0f)) {
    EXPECT_EQ(Bf16Value(Bf16Bits(x)), RoundToBf16(x));
  }
  // The pointer arithmetic of a typed pointer counts elements of its type.
  uint16_t h[4];
  EXPECT_EQ((TypedPtr(h, DType::kBf16) + 3).data(), static_cast<void*>(h + 3));
  float f[4];
  EXPECT_EQ((TypedPtr(f) + 3).f32(), f + 3);
  EXPECT_EQ(TypedPtr(h, DType::kBf16).f32(), nullptr);
}

// Element-wise and row ops on bf16 tensors: the f32 op on the bf16 values, rounded once.
TEST(TypedOpsTest, RowAndElementwiseOpsRoundOnceOnTheStore) {
  auto cpu = *CreateCpuBackend(2);
  const int rows = 13, dim = 40;
  const int64_t n = rows * dim;
  const std::vector<float> x = Rounded(Random(n, 2, -3, 3)), g = Random(dim, 3), b = Random(dim, 4);
  Bf16 xb(x), yb(n);
  std::vector<float> y(n), mean(rows), rstd(rows), mean_b(rows), rstd_b(rows);
  cpu->LayerNormForward(rows, dim, x.data(), g.data(), b.data(), y.data(), mean.data(),
                        rstd.data());
  cpu->LayerNormForward(rows, dim, xb.ptr(), g.data(), b.data(), yb.ptr(), mean_b.data(),
                        rstd_b.data());
  EXPECT_EQ(yb.values(), Rounded(y));
  EXPECT_EQ(mean_b, mean);
  EXPECT_EQ(rstd_b, rstd);

  for (ActivationOp act : {ActivationOp::kRelu, ActivationOp::kGelu}) {
    std::vector<float> pre = x, out(n);
    Bf16 pre_b(x), out_b(n);
    cpu->BiasActivation(rows, dim, b.data(), act, pre.data(), out.data());
    cpu->BiasActivation(rows, dim, b.data(), act, pre_b.ptr(), out_b.ptr());
    EXPECT_EQ(pre_b.values(), Rounded(pre));
    EXPECT_EQ(out_b.values(), Rounded(out));  // act of the f32 sum, before x is stored
  }

  // An accumulating output: dx += ..., read, summed in f32, rounded once.
  const std::vector<float> dy = Rounded(Random(n, 5)), dx0 = Rounded(Random(n, 6));
  std::vector<float> dx = dx0, dg(dim, 0.0f), db(dim, 0.0f), dg_b(dim, 0.0f), db_b(dim, 0.0f);
  Bf16 dyb(dy), dxb(dx0);
  cpu->LayerNormBackward(rows, dim, x.data(), g.data(), mean.data(), rstd.data(), dy.data(),
                         dx.data(), dg.data(), db.data());
  cpu->LayerNormBackward(rows, dim, xb.ptr(), g.data(), mean.data(), rstd.data(), dyb.ptr(),
                         dxb.ptr(), dg_b.data(), db_b.data());
  EXPECT_EQ(dxb.values(), Rounded(dx));
  EXPECT_EQ(dg_b, dg);  // f32 outputs of bf16 inputs: not rounded
  EXPECT_EQ(db_b, db);
}

// r = x + branch stored, then LayerNorm of what was stored.
TEST(TypedOpsTest, ResidualLayerNormIsTheAddThenTheNorm) {
  auto cpu = *CreateCpuBackend(2, Precision::kBf16);
  const int rows = 9, dim = 24;
  const int64_t n = rows * dim;
  const std::vector<float> g = Random(dim, 7), b = Random(dim, 8);
  Bf16 x(Random(n, 9, -2, 2)), branch(Random(n, 10)), r(n), y(n);
  std::vector<float> mean(rows), rstd(rows);
  cpu->ResidualLayerNormForward(rows, dim, x.ptr(), branch.ptr(), r.ptr(), g.data(), b.data(),
                                y.ptr(), mean.data(), rstd.data());
  Bf16 r2(x.values()), y2(n);
  std::vector<float> mean2(rows), rstd2(rows);
  cpu->Axpy(n, 1.0f, branch.ptr(), r2.ptr());
  cpu->LayerNormForward(rows, dim, r2.ptr(), g.data(), b.data(), y2.ptr(), mean2.data(),
                        rstd2.data());
  EXPECT_EQ(r.bits, r2.bits);
  EXPECT_EQ(y.bits, y2.bits);
  EXPECT_EQ(mean, mean2);
  EXPECT_EQ(rstd, rstd2);
  // In place: r may be x.
  cpu->ResidualLayerNormForward(rows, dim, x.ptr(), branch.ptr(), x.ptr(), g.data(), b.data(),
                                y.ptr(), mean.data(), rstd.data());
  EXPECT_EQ(x.bits, r2.bits);
}

// The forward epilogue: t = product + bias; pre = t; C = act(t), each stored once. Beside a bf16
// C the bias is a bf16 operand (rounded before it is added).
TEST(TypedOpsTest, GemmForwardEpilogueIsBiasThenActivation) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    auto cpu = *CreateCpuBackend(2, precision);
    const DType act = cpu->activation_dtype();
    const int m = 21, n = 16, k = 12;
    std::vector<float> a = Random(m * k, 11), w = Random(n * k, 12), bias = Random(n, 13);
    std::vector<float> t(m * n);
    cpu->Gemm(false, true, m, n, k, 1.0f, a.data(), k, w.data(), k, 0.0f, t.data(), n);  // f32 C
    std::vector<float> pre(m * n), y(m * n);
    GemmEpilogue e;
    e.bias = bias.data();
    e.act = ActivationOp::kGelu;
    e.pre = TypedPtr(pre.data(), act);
    cpu->Gemm(false, true, m, n, k, 1.0f, a.data(), k, w.data(), k, 0.0f, TypedPtr(y.data(), act),
              n, e);
    std::vector<float> pre_got(m * n), y_got(m * n);
    cpu->Convert(m * n, TypedPtr(pre.data(), act), pre_got.data());
    cpu->Convert(m * n, TypedPtr(y.data(), act), y_got.data());
    for (int r = 0; r < m; ++r) {
      for (int c = 0; c < n; ++c) {
        const auto stored = [&](float z) { return act == DType::kF32 ? z : RoundToBf16(z); };
        const float v = t[r * n + c] + stored(bias[c]);
        ASSERT_EQ(pre_got[r * n + c], stored(v));
        ASSERT_EQ(y_got[r * n + c], stored(Gelu(v)));  // GELU of the unrounded t
      }
    }
  }
}

// The backward epilogue: C = product * act'(act_input); bias_grad += the column sums of C as
// stored (rounded, beside a bf16 C).
TEST(TypedOpsTest, GemmBackwardEpilogueIsActivationGradThenColumnSums) {
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    auto cpu = *CreateCpuBackend(2, precision);
    const DType act = cpu->activation_dtype();
    const int m = 30, n = 10, k = 7;
    const std::vector<float> dy = Random(m * k, 14), w = Random(k * n, 15), h = Random(m * n, 16);
    std::vector<float> t(m * n), want(m * n), got(m * n), db(n, 0.5f), db_want(n, 0.5f);
    cpu->Gemm(false, false, m, n, k, 1.0f, dy.data(), k, w.data(), n, 0.0f, t.data(), n);
    cpu->ActivationBackward(m * n, ActivationOp::kGelu, h.data(), t.data(),
                            TypedPtr(want.data(), act));
    cpu->ColumnSum(m, n, TypedPtr(want.data(), act), n, 1.0f, db_want.data());
    GemmEpilogue e;
    e.grad_of = ActivationOp::kGelu;
    e.act_input = h.data();
    e.bias_grad = db.data();
    cpu->Gemm(false, false, m, n, k, 1.0f, dy.data(), k, w.data(), n, 0.0f,
              TypedPtr(got.data(), act), n, e);
    EXPECT_EQ(got, want);
    EXPECT_EQ(db, db_want);
  }
}

// bf16 products: the f32 product of the operands' bf16 values, whatever type they are stored in;
// a bf16 C is rounded once after the sum.
TEST(TypedOpsTest, Bf16ProductsReadBf16Values) {
  auto fp32 = *CreateCpuBackend(2), bf16 = *CreateCpuBackend(2, Precision::kBf16);
  const int m = 17, n = 9, k = 33;
  const std::vector<float> a = Random(m * k, 17), b = Random(k * n, 18);
  std::vector<float> want(m * n);
  fp32->Gemm(false, false, m, n, k, 1.0f, Rounded(a).data(), k, Rounded(b).data(), n, 0.0f,
             want.data(), n);
  Bf16 ab(a), c(m * n);
  bf16->Gemm(false, false, m, n, k, 1.0f, ab.ptr(), k, b.data(), n, 0.0f, c.ptr(), n);
  EXPECT_EQ(c.values(), Rounded(want));
}

// The fused classifier writes the gradient over the logits, of any type.
TEST(TypedOpsTest, ClassifierLossInPlaceOnBf16Logits) {
  auto cpu = *CreateCpuBackend(2);
  const int rows = 6, classes = 11;
  const std::vector<float> logits = Rounded(Random(rows * classes, 19, -4, 4));
  std::vector<int32_t> labels = {0, 10, 3, -1, 5, 5};
  std::vector<float> f32 = logits, loss(rows), loss_b(rows);
  std::vector<int32_t> correct(rows), correct_b(rows);
  cpu->ClassifierLoss(rows, classes, f32.data(), labels.data(), 0.5f, loss.data(), correct.data());
  Bf16 b(logits);
  cpu->ClassifierLoss(rows, classes, b.ptr(), labels.data(), 0.5f, loss_b.data(), correct_b.data());
  EXPECT_EQ(loss_b, loss);
  EXPECT_EQ(correct_b, correct);
  EXPECT_EQ(b.values(), Rounded(f32));
  for (int c = 0; c < classes; ++c) EXPECT_EQ(f32[3 * classes + c], 0.0f);  // label -1: no grad
  EXPECT_EQ(loss[3], 0.0f);
}

// The optimizer writes the products' copy of the weights in the same pass.
TEST(TypedOpsTest, OptimizerWritesTheOperandCopy) {
  auto cpu = *CreateCpuBackend(2);
  const int64_t n = 3000;
  std::vector<float> p = Random(n, 20), g = Random(n, 21), m(n, 0.0f), v(n, 0.0f);
  Bf16 copy(n);
  cpu->AdamWUpdate(n, 1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f, 0.1f, 0.001f, 1.0f, p.data(), g.data(),
                   m.data(), v.data(), copy.ptr());
  EXPECT_EQ(copy.values(), Rounded(p));
  Bf16 sgd_copy(n);
  std::vector<float> velocity(n, 0.0f);
  cpu->SgdUpdate(n, 0.1f, 0.9f, 0.0f, 1.0f, p.data(), g.data(), velocity.data(), sgd_copy.ptr());
  EXPECT_EQ(sgd_copy.values(), Rounded(p));
}

// Copies between types convert; within one type they move the bits.
TEST(TypedOpsTest, CopiesConvertBetweenTypes) {
  auto cpu = *CreateCpuBackend(1);
  const std::vector<float> x = Random(64, 22);
  Bf16 y(64), z(64);
  cpu->Copy2D(4, 16, x.data(), 16, y.ptr(), 16);
  EXPECT_EQ(y.values(), Rounded(x));
  cpu->Copy2D(4, 16, y.ptr(), 16, z.ptr(), 16);
  EXPECT_EQ(z.bits, y.bits);
  std::vector<float> back(64);
  cpu->Convert(64, z.ptr(), back.data());
  EXPECT_EQ(back, Rounded(x));
  cpu->Fill(z.ptr() + 10, 5, 0.1f);
  EXPECT_EQ(z.bits[12], Bf16Bits(0.1f));
}

// A codec chain's value stage run by the backend on a tensor of either type: the payload the chain
// itself writes for the tensor's values, and back (what a GPU site does before and after the
// copy to and from the host).
TEST(TypedOpsTest, ValueStagesEncodeAndDecodeLikeTheChain) {
  auto cpu = *CreateCpuBackend(2);
  const int64_t n = 1000;
  const std::vector<float> values = Rounded(Random(n, 23, -3, 3));
  for (const char* spec : {"none", "fp16", "bf16", "int8", "int4", "int8:64:sr"}) {
    SCOPED_TRACE(spec);
    auto chain = *compression::CodecChain::Create(spec);
    const compression::StageSpec& stage = chain->spec().stages[0];
    const uint64_t seed = chain->next_seed();
    const absl::Span<const uint8_t> frame = *chain->Encode(values, {static_cast<uint64_t>(n)});
    const std::vector<uint8_t> want(frame.begin() + compression::FrameHeaderSize(1, 1),
                                    frame.end());
    std::vector<uint8_t> from_f32, from_bf16;
    ASSERT_TRUE(cpu->EncodeValues(stage, seed, values.data(), n, &from_f32).ok());
    Bf16 b(values);
    ASSERT_TRUE(cpu->EncodeValues(stage, seed, b.ptr(), n, &from_bf16).ok());
    EXPECT_EQ(from_f32, want);
    EXPECT_EQ(from_bf16, want);  // the bf16 tensor holds the same values
    compression::DecodedTensor decoded;
    ASSERT_TRUE(chain->Decode(frame, &decoded).ok());
    std::vector<float> back(n);
    ASSERT_TRUE(cpu->DecodeValues(stage, want, n, back.data()).ok());
    EXPECT_EQ(back, decoded.values);
    Bf16 back16(n);
    ASSERT_TRUE(cpu->DecodeValues(stage, want, n, back16.ptr()).ok());
    EXPECT_EQ(back16.values(), Rounded(decoded.values));
    EXPECT_FALSE(
        cpu->DecodeValues(stage, absl::MakeConstSpan(want).subspan(1), n, back.data()).ok());
  }
  auto topk = *compression::CodecChain::Create("topk:0.1");
  std::vector<uint8_t> payload;
  EXPECT_EQ(cpu->EncodeValues(topk->spec().stages[0], 0, values.data(), n, &payload).code(),
            absl::StatusCode::kUnimplemented);
}

// A thread count below 1 is a caller's mistake: refused with its value (DESIGN.md §9), not raised
// to one.
TEST(CpuBackendTest, AThreadCountBelowOneIsRefusedWithItsValue) {
  for (int threads : {0, -4}) {
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCpuBackend(threads);
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(backend.status().message(),
              "the CPU backend needs at least 1 thread, got " + std::to_string(threads));
  }
  EXPECT_TRUE(CreateCpuBackend(1).ok());
}

}  // namespace
}  // namespace strait::site
