// A Strait model in the formats the Hugging Face ecosystem reads (`strait export`):
// model.safetensors with Hugging Face's names and layout (core/hf_names.h) and config.json: GPT-2's
// for `gpt`, LlamaForCausalLM's for `llama`.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/nn/safetensors.h"

namespace strait::tools {

struct ExportedModel {
  std::string safetensors;  // model.safetensors
  std::string config_json;  // config.json
};

// `params`: the whole model's parameters in Strait's layout order (LoadModelParams).
absl::StatusOr<ExportedModel> ExportModel(const ModelSpec& model, const std::vector<float>& params,
                                          site::SafetensorsDtype dtype);

// config.json of a gpt or llama for transformers; torch_dtype "float32" or "bfloat16".
std::string HfConfigJson(const ModelSpec& model, const std::string& torch_dtype);

}  // namespace strait::tools
