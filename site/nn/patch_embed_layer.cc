#include "site/nn/linear.h"
#include "site/nn/vit_layers.h"

namespace strait::site {

PatchEmbedLayer::PatchEmbedLayer(LayerLayout layout, DType act, const VitSpec& vit)
    : Layer(std::move(layout), act),
      vit_(vit),
      patches_(vit.Patches()),
      patch_size_(vit.channels * vit.patch * vit.patch),
      tokens_(patches_ + 1) {}

// Saved: the patches [n, P, C*p*p]. Scratch: projected patches [n, P, D]. Activation type.
int64_t PatchEmbedLayer::SavedBytes(int n) const {
  return int64_t{n} * patches_ * patch_size_ * SizeOf(act_dtype());
}
int64_t PatchEmbedLayer::ScratchBytes(int n) const {
  return int64_t{n} * patches_ * vit_.dim * SizeOf(act_dtype());
}

void PatchEmbedLayer::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                              int n, ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) {
  const int d = vit_.dim;
  const int64_t row = int64_t{tokens_} * d;
  const TypedPtr patches(saved, act_dtype()), projected(scratch, act_dtype());
  backend.ExtractPatches(n, vit_.channels, vit_.height, vit_.width, vit_.patch, x, patches);
  LinearForward(backend, int64_t{n} * patches_, patch_size_, d, patches, params.Operand(0),
                params.value[1], ActivationOp::kNone, projected, projected);
  backend.Copy2D(n, d, params.value[2], 0, y, row);
  backend.Copy2D(n, patches_ * d, projected, int64_t{patches_} * d, y + d, row);
  backend.BiasActivation(n, static_cast<int>(row), params.value[3], ActivationOp::kNone, y, y);
  if (pass.training && vit_.dropout > 0.0f)
    backend.Dropout(n * row, vit_.dropout, pass.dropout_key, pass.first_row * row, y, y);
}

void PatchEmbedLayer::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass,
                               int n, ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx,
                               const void* saved, void* scratch) {
  const int d = vit_.dim;
  const int64_t row = int64_t{tokens_} * d;
  const ConstTypedPtr patches(saved, act_dtype());
  const TypedPtr dprojected(scratch, act_dtype());
  if (pass.training && vit_.dropout > 0.0f)
    backend.Dropout(n * row, vit_.dropout, pass.dropout_key, pass.first_row * row, dy, dy);
  backend.ColumnSum(n, static_cast<int>(row), dy, row, 1.0f, params.grad[3]);  // pos_embed
  backend.ColumnSum(n, d, dy, row, 1.0f, params.grad[2]);                      // cls_token
  backend.Copy2D(n, patches_ * d, dy + d, row, dprojected, int64_t{patches_} * d);
  LinearBackward(backend, int64_t{n} * patches_, patch_size_, d, patches, params.Operand(0),
                 dprojected, nullptr, params.grad[0], params.grad[1]);
  if (dx) backend.Fill(dx, n * in_features(), 0.0f);
}

}  // namespace strait::site
