#include "site/nn/model.h"

#include <cmath>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/tensor_split.h"
#include "core/tied_embeddings.h"
#include "site/backend/counter_rng.h"
#include "site/nn/dense_layer.h"
#include "site/nn/gpt_layers.h"
#include "site/nn/llama_block.h"
#include "site/nn/transformer_block.h"
#include "site/nn/vit_layers.h"

namespace strait::site {

absl::StatusOr<std::vector<std::unique_ptr<Layer>>> BuildLayers(const ModelSpec& model,
                                                                LayerRange range, TensorShard shard,
                                                                const Backend* backend) {
  const int total = model.NumLayers();
  if (range.start < 0 || range.end > total || range.start >= range.end) {
    return absl::InvalidArgumentError(absl::StrCat("layer range [", range.start, ", ", range.end,
                                                   ") is not a non-empty part of the model's ",
                                                   total, " layers"));
  }
  STRAIT_RETURN_IF_ERROR(CheckTensorSplit(model, range, shard.parts));
  const std::vector<LayerLayout> layout = BuildModelLayout(model);
  const std::vector<LayerShard> shards = SplitLayers(model, range, shard.parts);
  const auto fused = [&](int dim, int heads) {
    return backend != nullptr && backend->FusedAttention(dim / heads);
  };
  const DType act = backend != nullptr ? backend->activation_dtype() : DType::kF32;
  std::vector<std::unique_ptr<Layer>> layers;
  for (int i = range.start; i < range.end; ++i) {
    const LayerShard& part = shards[i - range.start];
    LayerLayout l = ShardLayout(layout[i], part, shard.parts);
    const TensorShard layer_shard = part.role == ShardRole::kReplicated ? TensorShard{} : shard;
    if (model.family == ModelFamily::kMlp) {
      const bool hidden = i < total - 1;
      const ActivationOp activation = !hidden ? ActivationOp::kNone
                                      : model.mlp.activation == Activation::kRelu
                                          ? ActivationOp::kRelu
                                          : ActivationOp::kGelu;
      layers.push_back(std::make_unique<DenseLayer>(std::move(l), act, activation,
                                                    hidden ? model.mlp.dropout : 0.0f, part.role,
                                                    layer_shard));
    } else if (model.family == ModelFamily::kVit) {
      const VitSpec& v = model.vit;
      if (i == 0) {
        layers.push_back(std::make_unique<PatchEmbedLayer>(std::move(l), act, v));
      } else if (i == total - 1) {
        layers.push_back(std::make_unique<ClassifierHead>(std::move(l), act, v));
      } else {
        layers.push_back(std::make_unique<TransformerBlock>(
            std::move(l), act,
            TransformerBlockSpec{v.Tokens(), v.dim, v.heads, v.mlp_dim, v.dropout,
                                 /*causal=*/false, fused(v.dim, v.heads)},
            layer_shard));
      }
    } else {
      const GptSpec& g = model.gpt;
      if (i == 0) {
        layers.push_back(std::make_unique<TokenEmbedLayer>(std::move(l), act, g));
      } else if (i == total - 1) {
        layers.push_back(std::make_unique<LmHead>(std::move(l), act, g, model.family));
      } else if (model.family == ModelFamily::kLlama) {
        layers.push_back(
            std::make_unique<LlamaBlock>(std::move(l), act, g, fused(g.dim, g.heads), layer_shard));
      } else {
        layers.push_back(std::make_unique<TransformerBlock>(
            std::move(l), act,
            TransformerBlockSpec{g.context, g.dim, g.heads, g.mlp_dim, g.dropout, /*causal=*/true,
                                 fused(g.dim, g.heads)},
            layer_shard));
      }
    }
  }
  return layers;
}

void InitParameter(const ModelSpec& model, const LayerLayout& layer, int param, float* out) {
  const ParamLayout& p = layer.params[param];
  uint64_t key = CombineKey(CombineKey(model.init_seed, layer.index), param);
  float bound = 0.0f, constant = 0.0f;
  const std::optional<TiedMatrix> tied = TiedMatrixOf(model);
  if (tied && layer.index == tied->head_layer && param == tied->head_param) {
    // The head's copy of a tied matrix starts as the token embedding.
    key = CombineKey(CombineKey(model.init_seed, tied->embed_layer), tied->embed_param);
    bound = 0.02f * std::sqrt(3.0f);
  } else if (absl::EndsWith(p.name, "weight")) {
    const double out_features = p.shape[0], in_features = p.shape[1];
    bound = model.family == ModelFamily::kMlp
                ? static_cast<float>(1.0 / std::sqrt(in_features))
                : static_cast<float>(std::sqrt(6.0 / (in_features + out_features)));
  } else if (p.name == "cls_token" || p.name == "pos_embed" || p.name == "token_embed") {
    bound = 0.02f * std::sqrt(3.0f);  // uniform with standard deviation 0.02
  } else if (absl::EndsWith(p.name, "gamma")) {
    constant = 1.0f;
  }
  for (int64_t i = 0; i < p.numel; ++i) {
    out[i] = bound > 0.0f ? bound * (2.0f * CounterUniform(key, i) - 1.0f) : constant;
  }
}

}  // namespace strait::site
