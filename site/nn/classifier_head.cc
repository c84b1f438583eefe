#include "site/nn/linear.h"
#include "site/nn/vit_layers.h"

namespace strait::site {
namespace {
enum : int { kLnGamma, kLnBeta, kFcW, kFcB };
}  // namespace

ClassifierHead::ClassifierHead(LayerLayout layout, const VitSpec& vit)
    : Layer(std::move(layout)), vit_(vit), tokens_(vit.Tokens()) {}

// Saved: class tokens c [n, D], ln(c) [n, D], mean [n], rstd [n]. Scratch: dln [n, D], dc [n, D].
int64_t ClassifierHead::SavedFloats(int n) const { return int64_t{n} * (2 * vit_.dim + 2); }
int64_t ClassifierHead::ScratchFloats(int n) const { return int64_t{n} * 2 * vit_.dim; }

void ClassifierHead::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                             int n, const float* x, float* y, float* saved, float* scratch) {
  const int d = vit_.dim;
  float* c = saved;
  float* xn = c + int64_t{n} * d;
  float* mean = xn + int64_t{n} * d;
  float* rstd = mean + n;
  backend.Copy2D(n, d, x, int64_t{tokens_} * d, c, d);
  backend.LayerNormForward(n, d, c, params.value[kLnGamma], params.value[kLnBeta], xn, mean, rstd);
  LinearForward(backend, n, d, vit_.classes, xn, params.value[kFcW], params.value[kFcB],
                ActivationOp::kNone, y, y);
}

void ClassifierHead::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                              int n, const float* x, const float* y, float* dy, float* dx,
                              const float* saved, float* scratch) {
  const int d = vit_.dim;
  const float* c = saved;
  const float* xn = c + int64_t{n} * d;
  const float* mean = xn + int64_t{n} * d;
  const float* rstd = mean + n;
  float* dxn = scratch;
  float* dc = dxn + int64_t{n} * d;
  LinearBackward(backend, n, d, vit_.classes, xn, params.value[kFcW], dy, dxn, params.grad[kFcW],
                 params.grad[kFcB]);
  backend.Fill(dc, int64_t{n} * d, 0.0f);
  backend.LayerNormBackward(n, d, c, params.value[kLnGamma], mean, rstd, dxn, dc,
                            params.grad[kLnGamma], params.grad[kLnBeta]);
  if (dx == nullptr) return;
  // Only the class token (row 0 of each sample) reaches the logits.
  backend.Fill(dx, n * in_features(), 0.0f);
  backend.Copy2D(n, d, dc, d, dx, int64_t{tokens_} * d);
}

}  // namespace strait::site
