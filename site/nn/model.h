// Models from the job spec (`model:`): the layers of BuildModelLayout (core/model_layout.h) as
// engine layers, and their seeded initial parameters.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "core/model_layout.h"
#include "site/nn/layer.h"

namespace strait::site {

// Layers [range.start, range.end) of `model`, in order; InvalidArgument for an empty or
// out-of-bounds range. Building any sub-range gives those layers exactly as the whole model has
// them. With shard.parts > 1: rank shard.index's part of each (core/tensor_split.h SplitLayers),
// with its layout (ShardLayout). Attention goes through `backend`'s fused ops where it offers them
// for the model's head width (Backend::FusedAttention; a null backend: batched products).
absl::StatusOr<std::vector<std::unique_ptr<Layer>>> BuildLayers(const ModelSpec& model,
                                                                LayerRange range,
                                                                TensorShard shard = {},
                                                                const Backend* backend = nullptr);

// Writes the initial values of parameter `param` of `layer` (layout().params[param].numel floats)
// to `out`. A pure function of (model.init_seed, layer.index, param): identical for every split.
// Linear weights: U(-b, b) with b = 1/sqrt(in) (MLP, PyTorch's default) or sqrt(6/(in+out)) (ViT,
// Xavier); biases and LayerNorm betas 0, gammas 1; class token and position embedding std 0.02.
void InitParameter(const ModelSpec& model, const LayerLayout& layer, int param, float* out);

}  // namespace strait::site
