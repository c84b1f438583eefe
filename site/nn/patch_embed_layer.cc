#include "site/nn/linear.h"
#include "site/nn/vit_layers.h"

namespace strait::site {

PatchEmbedLayer::PatchEmbedLayer(LayerLayout layout, const VitSpec& vit)
    : Layer(std::move(layout)),
      vit_(vit),
      patches_(vit.Patches()),
      patch_size_(vit.channels * vit.patch * vit.patch),
      tokens_(patches_ + 1) {}

// Saved: the patches [n, P, C*p*p]. Scratch: projected patches [n, P, D].
int64_t PatchEmbedLayer::SavedFloats(int n) const { return int64_t{n} * patches_ * patch_size_; }
int64_t PatchEmbedLayer::ScratchFloats(int n) const { return int64_t{n} * patches_ * vit_.dim; }

void PatchEmbedLayer::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                              int n, const float* x, float* y, float* saved, float* scratch) {
  const int d = vit_.dim;
  const int64_t row = int64_t{tokens_} * d;
  backend.ExtractPatches(n, vit_.channels, vit_.height, vit_.width, vit_.patch, x, saved);
  LinearForward(backend, int64_t{n} * patches_, patch_size_, d, saved, params.value[0],
                params.value[1], ActivationOp::kNone, scratch, scratch);
  backend.Copy2D(n, d, params.value[2], 0, y, row);
  backend.Copy2D(n, patches_ * d, scratch, int64_t{patches_} * d, y + d, row);
  backend.BiasActivation(n, static_cast<int>(row), params.value[3], ActivationOp::kNone, y, y);
  if (pass.training && vit_.dropout > 0.0f)
    backend.Dropout(n * row, vit_.dropout, pass.dropout_key, pass.first_row * row, y, y);
}

void PatchEmbedLayer::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                               int n, const float* x, const float* y, float* dy, float* dx,
                               const float* saved, float* scratch) {
  const int d = vit_.dim;
  const int64_t row = int64_t{tokens_} * d;
  if (pass.training && vit_.dropout > 0.0f)
    backend.Dropout(n * row, vit_.dropout, pass.dropout_key, pass.first_row * row, dy, dy);
  backend.ColumnSum(n, static_cast<int>(row), dy, row, 1.0f, params.grad[3]);  // pos_embed
  backend.ColumnSum(n, d, dy, row, 1.0f, params.grad[2]);                      // cls_token
  backend.Copy2D(n, patches_ * d, dy + d, row, scratch, int64_t{patches_} * d);
  LinearBackward(backend, int64_t{n} * patches_, patch_size_, d, saved, params.value[0], scratch,
                 nullptr, params.grad[0], params.grad[1]);
  if (dx != nullptr) backend.Fill(dx, n * in_features(), 0.0f);
}

}  // namespace strait::site
