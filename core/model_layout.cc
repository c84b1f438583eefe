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

// A pre-LN transformer block over `tokens` tokens of width d with an MLP of width h.
LayerLayout TransformerBlockLayout(int index, int block, int64_t tokens, int64_t d, int64_t h) {
  LayerLayout layout;
  layout.index = index;
  layout.name = absl::StrCat("block", block);
  layout.in_shape = {tokens, d};
  layout.out_shape = {tokens, d};
  AddParam(layout, "ln1.gamma", {d});
  AddParam(layout, "ln1.beta", {d});
  AddLinear(layout, "attn.qkv.", d, 3 * d);
  AddLinear(layout, "attn.proj.", d, d);
  AddParam(layout, "ln2.gamma", {d});
  AddParam(layout, "ln2.beta", {d});
  AddLinear(layout, "mlp.fc1.", d, h);
  AddLinear(layout, "mlp.fc2.", h, d);
  // qkv + proj + fc1 + fc2 projections, plus QK^T and attention x V.
  layout.forward_flops = 2 * tokens * (3 * d * d + d * d + 2 * d * h) + 4 * tokens * tokens * d;
  return layout;
}

std::vector<LayerLayout> VitLayout(const VitSpec& vit) {
  const int64_t patches = vit.Patches(), tokens = vit.Tokens();
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
    layers.push_back(TransformerBlockLayout(b + 1, b, tokens, d, h));
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

// LLaMA: no position table (rotary positions), RMSNorm (gamma only), grouped-query attention and
// a SwiGLU MLP, no biases. The q, k, v projections follow each other, as do gate and up, so that
// each trio or pair is one [rows, D] weight matrix in the layer's parameter arena (one product).
LayerLayout LlamaBlockLayout(const GptSpec& gpt, int block) {
  const int64_t t = gpt.context, d = gpt.dim, f = gpt.mlp_dim;
  const int64_t q = int64_t{gpt.heads} * gpt.head_dim(),
                kv = int64_t{gpt.KeyValueHeads()} * gpt.head_dim();
  LayerLayout layout;
  layout.index = block + 1;
  layout.name = absl::StrCat("block", block);
  layout.in_shape = {t, d};
  layout.out_shape = {t, d};
  AddParam(layout, "attn_norm.gamma", {d});
  AddParam(layout, "attn.q.weight", {q, d});
  AddParam(layout, "attn.k.weight", {kv, d});
  AddParam(layout, "attn.v.weight", {kv, d});
  AddParam(layout, "attn.o.weight", {d, q});
  AddParam(layout, "mlp_norm.gamma", {d});
  AddParam(layout, "mlp.gate.weight", {f, d});
  AddParam(layout, "mlp.up.weight", {f, d});
  AddParam(layout, "mlp.down.weight", {d, f});
  layout.forward_flops = 2 * t * (d * (q + 2 * kv) + q * d + 3 * d * f) + 4 * t * t * q;
  return layout;
}

// gpt and llama: the embedding (gpt's with a learned position table), the blocks, the head (gpt:
// LayerNorm and a Linear with a bias; llama: RMSNorm and a Linear without). Causal attention does
// half of QK^T and attention x V's multiply-adds, but the engine computes the whole T x T products,
// so the estimate counts them whole.
std::vector<LayerLayout> LanguageModelLayout(const GptSpec& gpt, bool llama) {
  const int64_t t = gpt.context, d = gpt.dim, v = gpt.vocab;
  std::vector<LayerLayout> layers;

  LayerLayout embed;
  embed.index = 0;
  embed.name = "embed";
  embed.in_shape = {t};
  embed.out_shape = {t, d};
  AddParam(embed, "token_embed", {v, d});
  if (!llama) AddParam(embed, "pos_embed", {t, d});
  embed.forward_flops = t * d;
  layers.push_back(std::move(embed));

  for (int b = 0; b < gpt.depth; ++b) {
    layers.push_back(llama ? LlamaBlockLayout(gpt, b)
                           : TransformerBlockLayout(b + 1, b, t, d, gpt.mlp_dim));
  }

  LayerLayout head;
  head.index = gpt.depth + 1;
  head.name = "lm_head";
  head.in_shape = {t, d};
  head.out_shape = {t, v};
  if (llama) {
    AddParam(head, "norm.gamma", {d});
    AddParam(head, "fc.weight", {v, d});
  } else {
    AddParam(head, "ln.gamma", {d});
    AddParam(head, "ln.beta", {d});
    AddLinear(head, "fc.", d, v);
  }
  head.forward_flops = 2 * t * d * v;
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
  switch (model.family) {
    case ModelFamily::kMlp:
      return MlpLayout(model.mlp);
    case ModelFamily::kVit:
      return VitLayout(model.vit);
    case ModelFamily::kGpt:
    case ModelFamily::kLlama:
      return LanguageModelLayout(model.gpt, model.family == ModelFamily::kLlama);
  }
  return {};
}

absl::Status CheckShardParams(const ModelSpec& model, LayerRange range, int64_t params,
                              const std::string& path) {
  const std::vector<LayerLayout> layers = BuildModelLayout(model);
  int64_t expected = 0;
  for (int i = range.start; i < range.end && i < static_cast<int>(layers.size()); ++i) {
    expected += layers[i].param_count;
  }
  if (params == expected) return absl::OkStatus();
  // Layer 0 of a gpt is [vocab + context, dim]: a difference of whole rows of width dim is the
  // position table of another context.
  const int64_t diff = params - expected;
  if (model.family == ModelFamily::kGpt && range.start == 0 && diff % model.gpt.dim == 0 &&
      model.gpt.context + diff / model.gpt.dim > 0) {
    const int64_t trained = model.gpt.context + diff / model.gpt.dim;
    return absl::FailedPreconditionError(
        absl::StrCat("model.context ", model.gpt.context, " is ",
                     trained < model.gpt.context ? "longer" : "shorter",
                     " than the position table of ", path, " (", trained,
                     " positions: the model was trained with that context, and cannot attend "
                     "beyond the positions it learned); set model.context: ",
                     trained));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      path, " holds ", params, " parameters for layers [", range.start, ", ", range.end,
      ") but the job spec's model has ", expected, ": use the job spec the run was trained with"));
}

}  // namespace strait
