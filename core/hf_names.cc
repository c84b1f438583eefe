#include "core/hf_names.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "core/model_layout.h"

namespace strait {
namespace {

// Strait's name of a block parameter -> GPT-2's (after "h.N."), and whether it is a Conv1D weight.
const std::map<std::string, std::pair<std::string, bool>>& Gpt2BlockNames() {
  static const auto* names = new std::map<std::string, std::pair<std::string, bool>>{
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

const std::map<std::string, std::string>& Gpt2EdgeNames() {
  static const auto* names = new std::map<std::string, std::string>{
      {"token_embed", "wte.weight"}, {"pos_embed", "wpe.weight"},     {"ln.gamma", "ln_f.weight"},
      {"ln.beta", "ln_f.bias"},      {"fc.weight", "lm_head.weight"}, {"fc.bias", "lm_head.bias"},
  };
  return *names;
}

}  // namespace

absl::StatusOr<std::vector<HfTensor>> HfNames(const ModelSpec& model) {
  if (model.family != ModelFamily::kGpt) {
    return absl::UnimplementedError(absl::StrCat("no Hugging Face names for model.family ",
                                                 ToString(model.family), " (gpt has GPT-2's)"));
  }
  std::vector<HfTensor> out;
  const std::vector<LayerLayout> layout = BuildModelLayout(model);
  for (const LayerLayout& layer : layout) {
    const bool block = layer.index > 0 && layer.index + 1 < static_cast<int>(layout.size());
    for (int p = 0; p < static_cast<int>(layer.params.size()); ++p) {
      const ParamLayout& param = layer.params[p];
      HfTensor t{.layer = layer.index, .param = p};
      if (block) {
        const auto it = Gpt2BlockNames().find(param.name);
        if (it == Gpt2BlockNames().end()) {
          return absl::InternalError(absl::StrCat("no GPT-2 name for ", param.name));
        }
        t.name = absl::StrCat("h.", layer.index - 1, ".", it->second.first);
        t.transposed = it->second.second;
      } else {
        const auto it = Gpt2EdgeNames().find(param.name);
        if (it == Gpt2EdgeNames().end()) {
          return absl::InternalError(absl::StrCat("no GPT-2 name for ", param.name));
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

}  // namespace strait
