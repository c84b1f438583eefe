#include "site/nn/linear.h"
#include "site/nn/vit_layers.h"

namespace strait::site {
namespace {
enum : int { kLnGamma, kLnBeta, kFcW, kFcB };

// Saved: class tokens c [n, D], ln(c) [n, D] (activation type), mean [n], rstd [n].
struct ClassSaved {
  TypedPtr c, xn;
  float* mean;
  float* rstd;
};
ClassSaved ClassViews(ArenaCarver& a, DType act, int n, int d) {
  ClassSaved s;
  s.c = a.Take(int64_t{n} * d, act);
  s.xn = a.Take(int64_t{n} * d, act);
  s.mean = a.F32(n);
  s.rstd = a.F32(n);
  return s;
}
}  // namespace

ClassifierHead::ClassifierHead(LayerLayout layout, DType act, const VitSpec& vit)
    : Layer(std::move(layout), act), vit_(vit), tokens_(vit.Tokens()) {}

// Scratch: dln [n, D], dc [n, D].
int64_t ClassifierHead::SavedBytes(int n) const {
  ArenaCarver a;
  ClassViews(a, act_dtype(), n, vit_.dim);
  return a.bytes();
}
int64_t ClassifierHead::ScratchBytes(int n) const {
  ArenaCarver a;
  a.Take(int64_t{n} * vit_.dim, act_dtype());
  a.Take(int64_t{n} * vit_.dim, act_dtype());
  return a.bytes();
}

void ClassifierHead::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                             int n, ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) {
  const int d = vit_.dim;
  ArenaCarver a(saved);
  const ClassSaved s = ClassViews(a, act_dtype(), n, d);
  backend.Copy2D(n, d, x, int64_t{tokens_} * d, s.c, d);
  backend.LayerNormForward(n, d, s.c, params.value[kLnGamma], params.value[kLnBeta], s.xn, s.mean,
                           s.rstd);
  LinearForward(backend, n, d, vit_.classes, s.xn, params.Operand(kFcW), params.value[kFcB],
                ActivationOp::kNone, y, y);
}

void ClassifierHead::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                              int n, ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx,
                              const void* saved, void* scratch) {
  const int d = vit_.dim;
  ArenaCarver a(saved), t(scratch);
  const ClassSaved s = ClassViews(a, act_dtype(), n, d);
  const TypedPtr dxn = t.Take(int64_t{n} * d, act_dtype());
  const TypedPtr dc = t.Take(int64_t{n} * d, act_dtype());
  LinearBackward(backend, n, d, vit_.classes, s.xn, params.Operand(kFcW), dy, dxn,
                 params.grad[kFcW], params.grad[kFcB]);
  backend.Fill(dc, int64_t{n} * d, 0.0f);
  backend.LayerNormBackward(n, d, s.c, params.value[kLnGamma], s.mean, s.rstd, dxn, dc,
                            params.grad[kLnGamma], params.grad[kLnBeta]);
  if (!dx) return;
  // Only the class token (row 0 of each sample) reaches the logits.
  backend.Fill(dx, n * in_features(), 0.0f);
  backend.Copy2D(n, d, dc, d, dx, int64_t{tokens_} * d);
}

}  // namespace strait::site
