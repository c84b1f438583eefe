// Hugging Face's names and layout of a Strait model's parameters, for `strait export` and
// `model.init_from` (safetensors files that `transformers` loads). `gpt`: GPT-2's (`wte`, `wpe`,
// `h.N.ln_1`, `h.N.attn.c_attn`, `h.N.attn.c_proj`, `h.N.ln_2`, `h.N.mlp.c_fc`, `h.N.mlp.c_proj`,
// `ln_f`), whose Conv1D weights are stored [in, out]: Strait's [out, in] transposed. Strait's qkv
// columns are Q, K, then V with the heads contiguous, as `c_attn`'s. The LM head is `lm_head`
// (weight [vocab, dim], and its bias, which GPT-2 itself does not have). `llama`:
// LlamaForCausalLM's
// (`model.embed_tokens`, `model.layers.N.input_layernorm`, `.self_attn.{q,k,v,o}_proj`,
// `.post_attention_layernorm`, `.mlp.{gate,up,down}_proj`, `model.norm`, `lm_head`), whose
// weights are [out, in] like Strait's. Strait's rotary positions turn pairs of adjacent columns
// (2i, 2i+1) of a head; Hugging Face's turn column i with column i + dh/2, so q_proj's and
// k_proj's rows are permuted within each head (HfRotaryRow), as Hugging Face's conversion script
// permutes Meta's checkpoints.
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
  int rotary_heads = 0;        // > 0: rows are this many heads whose rows HfRotaryRow permutes.
};

// Every parameter of `model`, in Strait's layout order; UNIMPLEMENTED for a family without names.
absl::StatusOr<std::vector<HfTensor>> HfNames(const ModelSpec& model);

// Where Strait's row `row` of a rotary weight (heads of dh rows) sits in Hugging Face's: within
// its head, row 2i + h goes to h * dh/2 + i.
int64_t HfRotaryRow(int64_t row, int dh);

// Tensor t's values from Strait's layout into Hugging Face's (transposed, rows permuted), and back;
// NumElements(t.shape) floats each.
void ToHfLayout(const HfTensor& t, const float* strait, float* hf);
void FromHfLayout(const HfTensor& t, const float* hf, float* strait);

}  // namespace strait
