#include "tools/model_export.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/hf_names.h"
#include "core/model_layout.h"
#include "core/status.h"

namespace strait::tools {

absl::StatusOr<ExportedModel> ExportModel(const ModelSpec& model, const std::vector<float>& params,
                                          site::SafetensorsDtype dtype) {
  STRAIT_ASSIGN_OR_RETURN(const std::vector<HfTensor> names, HfNames(model));
  // Where each parameter starts in the whole model's vector.
  std::vector<std::vector<int64_t>> offsets;
  int64_t offset = 0;
  for (const LayerLayout& layer : BuildModelLayout(model)) {
    offsets.emplace_back();
    for (const ParamLayout& p : layer.params) {
      offsets.back().push_back(offset);
      offset += p.numel;
    }
  }
  if (offset != static_cast<int64_t>(params.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model has ", offset, " parameters; got ", params.size()));
  }
  std::vector<site::NamedTensor> tensors;
  for (const HfTensor& t : names) {
    const float* from = params.data() + offsets[t.layer][t.param];
    site::NamedTensor out{t.name, t.shape, {}};
    out.values.resize(static_cast<size_t>(NumElements(t.shape)));
    ToHfLayout(t, from, out.values.data());
    tensors.push_back(std::move(out));
  }
  const std::string torch_dtype = dtype == site::SafetensorsDtype::kF32 ? "float32" : "bfloat16";
  return ExportedModel{site::EncodeSafetensors(tensors, dtype, {{"format", "pt"}}),
                       HfConfigJson(model, torch_dtype)};
}

std::string HfConfigJson(const ModelSpec& model, const std::string& torch_dtype) {
  const GptSpec& g = model.gpt;
  if (model.family == ModelFamily::kLlama) {
    const nlohmann::ordered_json config = {{"architectures", {"LlamaForCausalLM"}},
                                           {"model_type", "llama"},
                                           {"vocab_size", g.vocab},
                                           {"hidden_size", g.dim},
                                           {"intermediate_size", g.mlp_dim},
                                           {"num_hidden_layers", g.depth},
                                           {"num_attention_heads", g.heads},
                                           {"num_key_value_heads", g.KeyValueHeads()},
                                           {"head_dim", g.head_dim()},
                                           {"max_position_embeddings", g.context},
                                           {"rms_norm_eps", g.norm_eps},
                                           {"rope_theta", g.rope_theta},
                                           {"hidden_act", "silu"},
                                           {"attention_bias", false},
                                           {"mlp_bias", false},
                                           {"tie_word_embeddings", g.tie_embeddings},
                                           {"torch_dtype", torch_dtype}};
    return config.dump(2) + "\n";
  }
  const nlohmann::ordered_json config = {{"architectures", {"GPT2LMHeadModel"}},
                                         {"model_type", "gpt2"},
                                         {"vocab_size", g.vocab},
                                         {"n_positions", g.context},
                                         {"n_ctx", g.context},
                                         {"n_embd", g.dim},
                                         {"n_layer", g.depth},
                                         {"n_head", g.heads},
                                         {"n_inner", g.mlp_dim},
                                         {"activation_function", "gelu_new"},
                                         {"layer_norm_epsilon", 1e-5},
                                         {"tie_word_embeddings", g.tie_embeddings},
                                         {"torch_dtype", torch_dtype}};
  return config.dump(2) + "\n";
}

}  // namespace strait::tools
