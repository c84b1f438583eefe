#include "site/nn/gpt_layers.h"

#include "site/nn/linear.h"

namespace strait::site {
namespace {
enum : int { kTokenEmbed, kPosEmbed };
enum : int { kLnGamma, kLnBeta, kFcW, kFcB };
}  // namespace

TokenEmbedLayer::TokenEmbedLayer(LayerLayout layout, const GptSpec& gpt)
    : Layer(std::move(layout)), gpt_(gpt) {}

void TokenEmbedLayer::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                              int n, const float* x, float* y, float* saved, float* scratch) {
  const int64_t rows = int64_t{n} * gpt_.context, row = int64_t{gpt_.context} * gpt_.dim;
  backend.EmbeddingLookup(rows, gpt_.dim, gpt_.vocab, x, params.value[kTokenEmbed], y);
  backend.BiasActivation(n, static_cast<int>(row), params.value[kPosEmbed], ActivationOp::kNone, y,
                         y);
  if (pass.training && gpt_.dropout > 0.0f) {
    backend.Dropout(n * row, gpt_.dropout, pass.dropout_key, pass.first_row * row, y, y);
  }
}

void TokenEmbedLayer::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                               int n, const float* x, const float* y, float* dy, float* dx,
                               const float* saved, float* scratch) {
  const int64_t rows = int64_t{n} * gpt_.context, row = int64_t{gpt_.context} * gpt_.dim;
  if (pass.training && gpt_.dropout > 0.0f) {
    backend.Dropout(n * row, gpt_.dropout, pass.dropout_key, pass.first_row * row, dy, dy);
  }
  backend.ColumnSum(n, static_cast<int>(row), dy, row, 1.0f, params.grad[kPosEmbed]);
  backend.EmbeddingBackward(rows, gpt_.dim, gpt_.vocab, x, dy, params.grad[kTokenEmbed]);
  if (dx != nullptr) backend.Fill(dx, n * in_features(), 0.0f);
}

LmHead::LmHead(LayerLayout layout, const GptSpec& gpt) : Layer(std::move(layout)), gpt_(gpt) {}

// Saved: ln(x) [R, D], mean [R], rstd [R] for R = n * context rows. Scratch: dln(x) [R, D] and,
// when the caller wants no dx, a place for it [R, D].
int64_t LmHead::SavedFloats(int n) const { return int64_t{n} * gpt_.context * (gpt_.dim + 2); }
int64_t LmHead::ScratchFloats(int n) const { return int64_t{n} * gpt_.context * 2 * gpt_.dim; }

void LmHead::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                     const float* x, float* y, float* saved, float* scratch) {
  const int d = gpt_.dim;
  const int64_t rows = int64_t{n} * gpt_.context;
  float* xn = saved;
  float* mean = xn + rows * d;
  float* rstd = mean + rows;
  backend.LayerNormForward(rows, d, x, params.value[kLnGamma], params.value[kLnBeta], xn, mean,
                           rstd);
  LinearForward(backend, rows, d, gpt_.vocab, xn, params.value[kFcW], params.value[kFcB],
                ActivationOp::kNone, y, y);
}

void LmHead::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                      const float* x, const float* y, float* dy, float* dx, const float* saved,
                      float* scratch) {
  const int d = gpt_.dim;
  const int64_t rows = int64_t{n} * gpt_.context;
  const float* xn = saved;
  const float* mean = xn + rows * d;
  const float* rstd = mean + rows;
  float* dxn = scratch;
  float* dx_acc = dx != nullptr ? dx : dxn + rows * d;
  LinearBackward(backend, rows, d, gpt_.vocab, xn, params.value[kFcW], dy, dxn, params.grad[kFcW],
                 params.grad[kFcB]);
  backend.Fill(dx_acc, rows * d, 0.0f);  // LayerNormBackward accumulates into dx.
  backend.LayerNormBackward(rows, d, x, params.value[kLnGamma], mean, rstd, dxn, dx_acc,
                            params.grad[kLnGamma], params.grad[kLnBeta]);
}

}  // namespace strait::site
