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
    const int64_t n = NumElements(t.shape);
    out.values.resize(static_cast<size_t>(n));
    if (!t.transposed) {
      std::copy_n(from, n, out.values.begin());
    } else {  // Strait's [rows = shape[1], cols = shape[0]] -> [shape[0], shape[1]].
      const int64_t rows = t.shape[1], cols = t.shape[0];
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) out.values[c * rows + r] = from[r * cols + c];
      }
    }
    tensors.push_back(std::move(out));
  }
  const GptSpec& g = model.gpt;
  const nlohmann::ordered_json config = {
      {"architectures", {"GPT2LMHeadModel"}},
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
      {"torch_dtype", dtype == site::SafetensorsDtype::kF32 ? "float32" : "bfloat16"}};
  return ExportedModel{site::EncodeSafetensors(tensors, dtype, {{"format", "pt"}}),
                       config.dump(2) + "\n"};
}

}  // namespace strait::tools
