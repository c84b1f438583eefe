#include "site/nn/gpt_layers.h"

#include "site/nn/linear.h"

namespace strait::site {
namespace {
enum : int { kTokenEmbed, kPosEmbed };
enum : int { kLnGamma, kLnBeta, kFcW, kFcB };  // gpt's head
enum : int { kRmsGamma, kRmsFcW };             // llama's

// The head's saved tensors for R rows: ln(x) [R, D] (activation type), mean and rstd [R].
struct HeadSaved {
  TypedPtr xn;
  float* mean;
  float* rstd;
};
HeadSaved HeadViews(ArenaCarver& c, DType act, int64_t rows, int dim) {
  HeadSaved s;
  s.xn = c.Take(rows * dim, act);
  s.mean = c.F32(rows);
  s.rstd = c.F32(rows);
  return s;
}
}  // namespace

TokenEmbedLayer::TokenEmbedLayer(LayerLayout layout, DType act, const GptSpec& gpt)
    : Layer(std::move(layout), act), gpt_(gpt) {}

void TokenEmbedLayer::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                              int n, ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) {
  const int64_t rows = int64_t{n} * gpt_.context, row = int64_t{gpt_.context} * gpt_.dim;
  backend.EmbeddingLookup(rows, gpt_.dim, gpt_.vocab, x.f32(), params.value[kTokenEmbed], y);
  if (positions()) {
    backend.BiasActivation(n, static_cast<int>(row), params.value[kPosEmbed], ActivationOp::kNone,
                           y, y);
  }
  if (pass.training && gpt_.dropout > 0.0f) {
    backend.Dropout(n * row, gpt_.dropout, pass.dropout_key, pass.first_row * row, y, y);
  }
}

void TokenEmbedLayer::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                               int n, ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx,
                               const void* saved, void* scratch) {
  const int64_t rows = int64_t{n} * gpt_.context, row = int64_t{gpt_.context} * gpt_.dim;
  if (pass.training && gpt_.dropout > 0.0f) {
    backend.Dropout(n * row, gpt_.dropout, pass.dropout_key, pass.first_row * row, dy, dy);
  }
  if (positions()) {
    backend.ColumnSum(n, static_cast<int>(row), dy, row, 1.0f, params.grad[kPosEmbed]);
  }
  backend.EmbeddingBackward(rows, gpt_.dim, gpt_.vocab, x.f32(), dy, params.grad[kTokenEmbed]);
  if (dx) backend.Fill(dx, n * in_features(), 0.0f);
}

LmHead::LmHead(LayerLayout layout, DType act, const GptSpec& gpt, ModelFamily family)
    : Layer(std::move(layout), act), gpt_(gpt), family_(family) {}

// Saved: HeadSaved. Scratch: dln(x) [R, D] and, when the caller wants no dx, a place for it.
int64_t LmHead::SavedBytes(int n) const {
  ArenaCarver c;
  HeadViews(c, act_dtype(), int64_t{n} * gpt_.context, gpt_.dim);
  return c.bytes();
}
int64_t LmHead::ScratchBytes(int n) const {
  ArenaCarver c;
  c.Take(int64_t{n} * gpt_.context * gpt_.dim, act_dtype());
  c.Take(int64_t{n} * gpt_.context * gpt_.dim, act_dtype());
  return c.bytes();
}

void LmHead::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                     ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) {
  const int d = gpt_.dim;
  const int64_t rows = int64_t{n} * gpt_.context;
  ArenaCarver c(saved);
  const HeadSaved s = HeadViews(c, act_dtype(), rows, d);
  if (rms()) {
    backend.RmsNormForward(rows, d, gpt_.norm_eps, x, params.value[kRmsGamma], s.xn, s.rstd);
    LinearForward(backend, rows, d, gpt_.vocab, s.xn, params.Operand(kRmsFcW), nullptr,
                  ActivationOp::kNone, y, y);
    return;
  }
  backend.LayerNormForward(rows, d, x, params.value[kLnGamma], params.value[kLnBeta], s.xn, s.mean,
                           s.rstd);
  LinearForward(backend, rows, d, gpt_.vocab, s.xn, params.Operand(kFcW), params.value[kFcB],
                ActivationOp::kNone, y, y);
}

void LmHead::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                      ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx, const void* saved,
                      void* scratch) {
  const int d = gpt_.dim;
  const int64_t rows = int64_t{n} * gpt_.context;
  ArenaCarver c(saved), t(scratch);
  const HeadSaved s = HeadViews(c, act_dtype(), rows, d);
  const TypedPtr dxn = t.Take(rows * d, act_dtype());
  const TypedPtr spare = t.Take(rows * d, act_dtype());
  const TypedPtr dx_acc = dx ? dx : spare;
  backend.Fill(dx_acc, rows * d, 0.0f);  // The norms' backward accumulates into dx.
  if (rms()) {
    LinearBackward(backend, rows, d, gpt_.vocab, s.xn, params.Operand(kRmsFcW), dy, dxn,
                   params.grad[kRmsFcW], nullptr);
    backend.RmsNormBackward(rows, d, x, params.value[kRmsGamma], s.rstd, dxn, dx_acc,
                            params.grad[kRmsGamma]);
    return;
  }
  LinearBackward(backend, rows, d, gpt_.vocab, s.xn, params.Operand(kFcW), dy, dxn,
                 params.grad[kFcW], params.grad[kFcB]);
  backend.LayerNormBackward(rows, d, x, params.value[kLnGamma], s.mean, s.rstd, dxn, dx_acc,
                            params.grad[kLnGamma], params.grad[kLnBeta]);
}

}  // namespace strait::site
