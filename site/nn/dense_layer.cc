#include "site/nn/dense_layer.h"

#include "site/nn/linear.h"

namespace strait::site {

DenseLayer::DenseLayer(LayerLayout layout, ActivationOp act, float dropout)
    : Layer(std::move(layout)), act_(act), dropout_(dropout) {}

// GELU's derivative needs the pre-activation; ReLU's is read off the output.
int64_t DenseLayer::SavedFloats(int n) const {
  return act_ == ActivationOp::kGelu ? n * out_features() : 0;
}

void DenseLayer::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                         const float* x, float* y, float* saved, float* scratch) {
  const int in = static_cast<int>(in_features()), out = static_cast<int>(out_features());
  float* pre = act_ == ActivationOp::kGelu ? saved : y;
  LinearForward(backend, n, in, out, x, params.value[0], params.value[1], act_, pre, y);
  if (pass.training && dropout_ > 0.0f)
    backend.Dropout(int64_t{n} * out, dropout_, pass.dropout_key, pass.first_row * out, y, y);
}

void DenseLayer::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                          const float* x, const float* y, float* dy, float* dx, const float* saved,
                          float* scratch) {
  const int in = static_cast<int>(in_features()), out = static_cast<int>(out_features());
  const int64_t count = int64_t{n} * out;
  if (pass.training && dropout_ > 0.0f)
    backend.Dropout(count, dropout_, pass.dropout_key, pass.first_row * out, dy, dy);
  // ReLU after dropout: a dropped unit has y = 0 and gets no gradient either way.
  if (act_ != ActivationOp::kNone) {
    backend.ActivationBackward(count, act_, act_ == ActivationOp::kGelu ? saved : y, dy, dy);
  }
  LinearBackward(backend, n, in, out, x, params.value[0], dy, dx, params.grad[0], params.grad[1]);
}

}  // namespace strait::site
