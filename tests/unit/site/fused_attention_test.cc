// The CPU backend's fused attention ops against the batched products through a [T, T] matrix: the
// same attention, forward and backward, in fp32 and under bf16 products. (layer_gradient_test
// checks the fused layer against finite differences; backend_ops_test the CUDA kernels against
// these ops.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "site/backend/counter_rng.h"
#include "site/backend/cpu/cpu_backend.h"
#include "site/nn/attention.h"

namespace strait::site {
namespace {

struct Result {
  std::vector<float> out, dqkv;
};

Result RunAttention(const AttentionShape& s, Precision precision) {
  auto backend = *CreateCpuBackend(2, precision, AttentionKernel::kFused);
  const DType act = backend->activation_dtype();
  const int64_t rows = s.rows(), d = s.dim();
  std::vector<float> qkv(rows * 3 * d), dout(rows * d);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = 2.0f * CounterUniform(1, i) - 1.0f;
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = 2.0f * CounterUniform(2, i) - 1.0f;
  // The tensors in the activation type, as a transformer block holds them.
  std::vector<float> qkv_t(qkv.size()), dout_t(dout.size()), out_t(rows * d), dqkv_t(rows * 3 * d);
  backend->Convert(qkv.size(), qkv.data(), TypedPtr(qkv_t.data(), act));
  backend->Convert(dout.size(), dout.data(), TypedPtr(dout_t.data(), act));
  std::vector<float> saved(AttentionSavedBytes(s, act) / 4 + 1),
      scratch(AttentionScratchBytes(s, act) / 4 + 1);
  AttentionForward(*backend, s, TypedPtr(qkv_t.data(), act), TypedPtr(out_t.data(), act),
                   saved.data(), scratch.data());
  AttentionBackward(*backend, s, TypedPtr(qkv_t.data(), act), TypedPtr(out_t.data(), act),
                    saved.data(), TypedPtr(dout_t.data(), act), TypedPtr(dqkv_t.data(), act),
                    scratch.data());
  Result r{std::vector<float>(rows * d), std::vector<float>(rows * 3 * d)};
  backend->Convert(r.out.size(), TypedPtr(out_t.data(), act), r.out.data());
  backend->Convert(r.dqkv.size(), TypedPtr(dqkv_t.data(), act), r.dqkv.data());
  return r;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, float tol,
                 const char* what) {
  float scale = 0.0f;
  for (float w : want) scale = std::max(scale, std::abs(w));
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * scale) << what << " [" << i << "]";
  }
}

TEST(FusedAttentionTest, MatchesBatchedProducts) {
  // 70 tokens: a last tile of 6 keys; widths 64 (the widest) and 24 (three float4 pairs).
  for (AttentionShape s : {AttentionShape{2, 70, 3, 64, true}, AttentionShape{2, 70, 3, 24, false},
                           AttentionShape{1, 33, 2, 8, true}}) {
    for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
      SCOPED_TRACE(testing::Message() << "T " << s.tokens << " dh " << s.dh << " causal "
                                      << s.causal << " bf16 " << (precision == Precision::kBf16));
      s.fused = false;
      const Result batched = RunAttention(s, precision);
      s.fused = true;
      const Result fused = RunAttention(s, precision);
      // bf16: the fused ops round the probabilities before they are normalised, the products
      // after: the two differ by bf16's rounding (2^-9 relative) per term.
      const float tol = precision == Precision::kFp32 ? 2e-6f : 2e-2f;
      ExpectClose(fused.out, batched.out, tol, "output");
      ExpectClose(fused.dqkv, batched.dqkv, precision == Precision::kFp32 ? 1e-5f : 3e-2f, "dqkv");
    }
  }
}

}  // namespace
}  // namespace strait::site
