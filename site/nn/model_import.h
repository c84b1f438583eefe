// `model.init_from: MODEL_DIR`: a gpt's or llama's parameters from a Hugging Face model directory
// (model.safetensors and config.json, as `strait export` writes and `transformers` saves), for
// fine-tuning a released model. A stage reads only its own layers' tensors (each tensor's bytes by
// its offsets, not the whole file). Strait's own checkpoints stay the format for resuming.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "core/model_layout.h"

namespace strait::site {

// The whole (unsharded) parameters of layers `range` of `model`, in Strait's layout order, from
// `dir`. Checked: config.json's architecture and the hyperparameters shapes do not show (heads,
// kv_heads, rope_theta, norm_eps), each tensor's presence, shape and dtype (F32, F16 or BF16);
// an error names the file and the tensor. With tied embeddings the head's copy is the embedding.
// Blocks on file reads. Thread-safe.
absl::StatusOr<std::vector<float>> ImportLayers(const ModelSpec& model, LayerRange range,
                                                const std::string& dir);

}  // namespace strait::site
