#include "core/model_layout.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace strait {
namespace {

void AddParam(LayerLayout& layer, std::string name, std::vector<int64_t> shape) {
  int64_t numel = NumElements(shape);
  layer.params.push_back({std::move(name), std::move(shape), numel});
  layer.param_count += numel;
}

// Linear named `prefix` ("" for the layer's own weight/bias) from `in` to `out` features.
void AddLinear(LayerLayout& layer, const std::string& prefix, int64_t in, int64_t out) {
  AddParam(layer, prefix + "weight", {out, in});
  AddParam(layer, prefix + "bias", {out});
}

std::vector<LayerLayout> MlpLayout(const MlpSpec& mlp) {
  std::vector<LayerLayout> layers;
  int64_t in = mlp.input;
  for (size_t i = 0; i <= mlp.hidden.size(); ++i) {
    bool last = i == mlp.hidden.size();
    int64_t out = last ? mlp.classes : mlp.hidden[i];
    LayerLayout layer;
    layer.index = static_cast<int>(i);
    layer.name =
        last ? absl::StrCat("fc", i) : absl::StrCat("fc", i, "+", ToString(mlp.activation));
    layer.in_shape = {in};
    layer.out_shape = {out};
    AddLinear(layer, "", in, out);
    layer.forward_flops = 2 * in * out;
    layers.push_back(std::move(layer));
    in = out;
  }
  return layers;
}

std::vector<LayerLayout> VitLayout(const VitSpec& vit) {
  const int64_t patches = int64_t{vit.height / vit.patch} * (vit.width / vit.patch);
  const int64_t tokens = patches + 1;  // + class token
  const int64_t patch_size = int64_t{vit.channels} * vit.patch * vit.patch;
  const int64_t d = vit.dim, h = vit.mlp_dim;
  std::vector<LayerLayout> layers;

  LayerLayout embed;
  embed.index = 0;
  embed.name = "patch_embed";
  embed.in_shape = {vit.channels, vit.height, vit.width};
  embed.out_shape = {tokens, d};
  AddLinear(embed, "proj.", patch_size, d);
  AddParam(embed, "cls_token", {d});
  AddParam(embed, "pos_embed", {tokens, d});
  embed.forward_flops = 2 * patches * patch_size * d;
  layers.push_back(std::move(embed));

  for (int b = 0; b < vit.depth; ++b) {
    LayerLayout block;
    block.index = b + 1;
    block.name = absl::StrCat("block", b);
    block.in_shape = {tokens, d};
    block.out_shape = {tokens, d};
    AddParam(block, "ln1.gamma", {d});
    AddParam(block, "ln1.beta", {d});
    AddLinear(block, "attn.qkv.", d, 3 * d);
    AddLinear(block, "attn.proj.", d, d);
    AddParam(block, "ln2.gamma", {d});
    AddParam(block, "ln2.beta", {d});
    AddLinear(block, "mlp.fc1.", d, h);
    AddLinear(block, "mlp.fc2.", h, d);
    // qkv + proj + fc1 + fc2 projections, plus QK^T and attention x V.
    block.forward_flops = 2 * tokens * (3 * d * d + d * d + 2 * d * h) + 4 * tokens * tokens * d;
    layers.push_back(std::move(block));
  }

  LayerLayout head;
  head.index = vit.depth + 1;
  head.name = "head";
  head.in_shape = {tokens, d};
  head.out_shape = {vit.classes};
  AddParam(head, "ln.gamma", {d});
  AddParam(head, "ln.beta", {d});
  AddLinear(head, "fc.", d, vit.classes);
  head.forward_flops = 2 * d * vit.classes;
  layers.push_back(std::move(head));
  return layers;
}

}  // namespace

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::vector<LayerLayout> BuildModelLayout(const ModelSpec& model) {
  return model.family == ModelFamily::kMlp ? MlpLayout(model.mlp) : VitLayout(model.vit);
}

}  // namespace strait
