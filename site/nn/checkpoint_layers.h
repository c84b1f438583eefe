// Checkpoints cut into consecutive layers and put back together: how layers that change owner after
// a re-plan (plan/split_planner.h) carry their state from the old site to the new one. A cut is
// itself a checkpoint of its layers (same format, its own fingerprint), so it travels as a
// checkpoint file's bytes (SerializeCheckpoint / ParseCheckpoint) and is verified like one.
//
// Per layer a checkpoint holds the layer's whole parameters at its offset in each weight array
// (the newest, and with 2bw the previous and the lookahead weights) and in each optimizer-state
// array (SGD: velocity; AdamW: m, then v; site/nn/optimizer.h), layers in order.
#pragma once

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/nn/checkpoint.h"

namespace strait::site {

// Layers `layers` of `state` (a checkpoint of `model`'s layers [first_layer, end_layer), which
// must contain them). InvalidArgument when it does not, or when its arrays do not have the sizes
// the model's layout gives its layers.
absl::StatusOr<CheckpointState> CutLayers(const CheckpointState& state, const ModelSpec& model,
                                          LayerRange layers);

// The checkpoint of the layers that `parts` hold, which must follow each other without gap or
// overlap, be of the same step, optimizer, seeds and weight versions, and each have its layers'
// sizes and fingerprint. FailedPrecondition naming the part that does not fit.
absl::StatusOr<CheckpointState> JoinLayers(const std::vector<CheckpointState>& parts,
                                           const ModelSpec& model);

// A cut as the floats of a MOVE frame (proto Purpose MOVE): its first and end layer, then its
// newest weights, the weight versions of 2bw and the optimizer state; two zeros for no layers
// (null).
std::vector<float> LayerPartToFloats(const CheckpointState* part);

// The cut those floats carry (nullopt for none), with `like`'s step, optimizer, seeds and weight
// versions (like: a checkpoint of the same run; its params must not be empty). InvalidArgument
// when the floats are not a range of `model`'s layers with exactly their values.
absl::StatusOr<std::optional<CheckpointState>> LayerPartFromFloats(const std::vector<float>& floats,
                                                                   const CheckpointState& like,
                                                                   const ModelSpec& model);

}  // namespace strait::site
