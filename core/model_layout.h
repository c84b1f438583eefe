// The layers of a model as the job spec describes them: names, shapes and parameter tensors.
//
// This is the contract between the job spec and the engine (site/nn): the engine builds exactly
// these layers with exactly these parameter tensors, in this order, so that `strait config check`
// can show the split and the boundary sizes without building a model, and every process agrees on
// shapes. Weights are stored [out, in] row-major.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/job_spec.h"

namespace strait {

struct ParamLayout {
  std::string name;  // e.g. "weight", "bias", "ln1.gamma"
  std::vector<int64_t> shape;
  int64_t numel = 0;
};

struct LayerLayout {
  int index = 0;
  std::string name;                // e.g. "fc0+relu", "patch_embed", "block2", "head"
  std::vector<int64_t> in_shape;   // Per sample, e.g. {784} or {17, 64}.
  std::vector<int64_t> out_shape;  // Per sample.
  std::vector<ParamLayout> params;
  int64_t param_count = 0;
  int64_t forward_flops = 0;  // Multiply-adds x 2 per sample for the forward pass (estimate).
};

// All layers 0 .. NumLayers()-1 of the model. The spec must be valid (ParseJobSpec checked it).
std::vector<LayerLayout> BuildModelLayout(const ModelSpec& model);

// Checks that a checkpoint shard (`path`) holding `params` floats for layers `range` fits `model`.
// A gpt shard whose position table is another context is named as such ("model.context 256 is
// longer than the position table of ...: set model.context: 128"); other sizes say both counts.
absl::Status CheckShardParams(const ModelSpec& model, LayerRange range, int64_t params,
                              const std::string& path);

// Product of a shape's dimensions (1 for an empty shape).
int64_t NumElements(const std::vector<int64_t>& shape);

// "[32, 1024]"
std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace strait
