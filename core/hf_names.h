// Hugging Face's names and layout of a Strait model's parameters, for `strait export` and
// `model.init_from` (safetensors files that `transformers` loads). `gpt`: GPT-2's (`wte`, `wpe`,
// `h.N.ln_1`, `h.N.attn.c_attn`, `h.N.attn.c_proj`, `h.N.ln_2`, `h.N.mlp.c_fc`, `h.N.mlp.c_proj`,
// `ln_f`), whose Conv1D weights are stored [in, out]: Strait's [out, in] transposed. Strait's qkv
// columns are Q, K, then V with the heads contiguous, as `c_attn`'s. The LM head is `lm_head`
// (weight [vocab, dim], and its bias, which GPT-2 itself does not have).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"

namespace strait {

// One parameter tensor as Hugging Face stores it.
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;  // Hugging Face's.
  int layer = 0;               // Where it lives in Strait's layout (core/model_layout.h):
  int param = 0;               // layer and parameter index.
  bool transposed = false;     // [in, out] against Strait's [out, in].
};

// Every parameter of `model`, in Strait's layout order; UNIMPLEMENTED for a family without names.
absl::StatusOr<std::vector<HfTensor>> HfNames(const ModelSpec& model);

}  // namespace strait
