#include "core/hf_names.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "core/model_layout.h"

namespace strait {
namespace {

// Strait's name of a block parameter -> Hugging Face's after the block's prefix, and how its layout
// differs.
struct BlockName {
  std::string name;
  bool transposed = false;  // GPT-2's Conv1D
  bool rotary = false;      // LLaMA's q and k (HfTensor::rotary_heads)
};
using BlockNames = std::map<std::string, BlockName>;

const BlockNames& Gpt2BlockNames() {
  static const auto* names = new BlockNames{
      {"ln1.gamma", {"ln_1.weight", false}},
      {"ln1.beta", {"ln_1.bias", false}},
      {"attn.qkv.weight", {"attn.c_attn.weight", true}},
      {"attn.qkv.bias", {"attn.c_attn.bias", false}},
      {"attn.proj.weight", {"attn.c_proj.weight", true}},
      {"attn.proj.bias", {"attn.c_proj.bias", false}},
      {"ln2.gamma", {"ln_2.weight", false}},
      {"ln2.beta", {"ln_2.bias", false}},
      {"mlp.fc1.weight", {"mlp.c_fc.weight", true}},
      {"mlp.fc1.bias", {"mlp.c_fc.bias", false}},
      {"mlp.fc2.weight", {"mlp.c_proj.weight", true}},
      {"mlp.fc2.bias", {"mlp.c_proj.bias", false}},
  };
  return *names;
}

const BlockNames& LlamaBlockNames() {
  static const auto* names = new BlockNames{
      {"attn_norm.gamma", {"input_layernorm.weight"}},
      {"attn.q.weight", {"self_attn.q_proj.weight", false, true}},
      {"attn.k.weight", {"self_attn.k_proj.weight", false, true}},
      {"attn.v.weight", {"self_attn.v_proj.weight"}},
      {"attn.o.weight", {"self_attn.o_proj.weight"}},
      {"mlp_norm.gamma", {"post_attention_layernorm.weight"}},
      {"mlp.gate.weight", {"mlp.gate_proj.weight"}},
      {"mlp.up.weight", {"mlp.up_proj.weight"}},
      {"mlp.down.weight", {"mlp.down_proj.weight"}},
  };
  return *names;
}

// The embedding's and the head's parameters.
using EdgeNames = std::map<std::string, std::string>;
const EdgeNames& Gpt2EdgeNames() {
  static const auto* names = new EdgeNames{
      {"token_embed", "wte.weight"}, {"pos_embed", "wpe.weight"},     {"ln.gamma", "ln_f.weight"},
      {"ln.beta", "ln_f.bias"},      {"fc.weight", "lm_head.weight"}, {"fc.bias", "lm_head.bias"},
  };
  return *names;
}
const EdgeNames& LlamaEdgeNames() {
  static const auto* names = new EdgeNames{{"token_embed", "model.embed_tokens.weight"},
                                           {"norm.gamma", "model.norm.weight"},
                                           {"fc.weight", "lm_head.weight"}};
  return *names;
}

}  // namespace

absl::StatusOr<std::vector<HfTensor>> HfNames(const ModelSpec& model) {
  if (!model.IsLanguageModel()) {
    return absl::UnimplementedError(absl::StrCat("no Hugging Face names for model.family ",
                                                 ToString(model.family),
                                                 " (gpt has GPT-2's, llama LLaMA's)"));
  }
  const bool llama = model.family == ModelFamily::kLlama;
  const BlockNames& block_names = llama ? LlamaBlockNames() : Gpt2BlockNames();
  const EdgeNames& edge_names = llama ? LlamaEdgeNames() : Gpt2EdgeNames();
  const std::string block_prefix = llama ? "model.layers." : "h.";
  std::vector<HfTensor> out;
  const std::vector<LayerLayout> layout = BuildModelLayout(model);
  for (const LayerLayout& layer : layout) {
    const bool block = layer.index > 0 && layer.index + 1 < static_cast<int>(layout.size());
    for (int p = 0; p < static_cast<int>(layer.params.size()); ++p) {
      const ParamLayout& param = layer.params[p];
      HfTensor t{.layer = layer.index, .param = p};
      if (block) {
        const auto it = block_names.find(param.name);
        if (it == block_names.end()) {
          return absl::InternalError(absl::StrCat("no Hugging Face name for ", param.name));
        }
        t.name = absl::StrCat(block_prefix, layer.index - 1, ".", it->second.name);
        t.transposed = it->second.transposed;
        if (it->second.rotary)
          t.rotary_heads = static_cast<int>(param.shape[0] / model.gpt.head_dim());
      } else {
        const auto it = edge_names.find(param.name);
        if (it == edge_names.end()) {
          return absl::InternalError(absl::StrCat("no Hugging Face name for ", param.name));
        }
        t.name = it->second;
      }
      t.shape = param.shape;
      if (t.transposed) std::swap(t.shape[0], t.shape[1]);
      out.push_back(std::move(t));
    }
  }
  return out;
}

int64_t HfRotaryRow(int64_t row, int dh) {
  const int64_t head = row / dh, j = row % dh, half = dh / 2;
  return head * dh + (j % 2) * half + j / 2;
}

namespace {

// Calls copy(strait_index, hf_index) for every element of t.
template <class Fn>
void ForEachElement(const HfTensor& t, Fn copy) {
  const int64_t rows = t.shape[0], cols = t.shape.size() > 1 ? t.shape[1] : 1;
  if (t.transposed) {  // Hugging Face's [rows, cols] is Strait's [cols, rows].
    for (int64_t r = 0; r < cols; ++r) {
      for (int64_t c = 0; c < rows; ++c) copy(r * rows + c, c * cols + r);
    }
    return;
  }
  const int dh = t.rotary_heads > 0 ? static_cast<int>(rows / t.rotary_heads) : 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t to = dh > 0 ? HfRotaryRow(r, dh) : r;
    for (int64_t c = 0; c < cols; ++c) copy(r * cols + c, to * cols + c);
  }
}

}  // namespace

void ToHfLayout(const HfTensor& t, const float* strait, float* hf) {
  ForEachElement(t, [&](int64_t s, int64_t h) { hf[h] = strait[s]; });
}

void FromHfLayout(const HfTensor& t, const float* hf, float* strait) {
  ForEachElement(t, [&](int64_t s, int64_t h) { strait[s] = hf[h]; });
}

}  // namespace strait
