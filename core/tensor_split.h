// Tensor (model) parallelism inside a site (DESIGN.md §4, `sites[i].tensor_parallel: T`): how the
// layers of a site's range split over T ranks, Megatron-style, and how each parameter's full
// tensor maps to the shards the ranks hold.
//
//   mlp: the Linear layers pair up from the range's start: the first of a pair is column-parallel
//     (its output features split: each rank computes its slice, the activation and dropout act on
//     it), the second row-parallel (its input features split: partial outputs summed across the
//     ranks, then bias, activation and dropout on the whole); one all-reduce in the forward pass
//     (after the row layer) and one in the backward (the column layer's input gradient). A last
//     unpaired layer is row-parallel on its slice of the replicated input (its input gradient is
//     assembled with one all-reduce of the zero-padded slices).
//   vit, gpt: every transformer block splits its attention heads (qkv column-parallel by head,
//     proj row-parallel) and its MLP (fc1 column-, fc2 row-parallel): one all-reduce after each
//     branch forward, one before each layer norm backward. Embeddings and heads are replicated.
//   llama: likewise, q by query head, k and v by key/value head, gate and up column-parallel,
//     o and down row-parallel.
//
// Replicated parameters (layer norms, the biases of row-parallel layers, embeddings, heads) are
// whole on every rank and get the same gradient on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/job_spec.h"
#include "core/model_layout.h"

namespace strait {

// How one parameter is sharded: its dimension `axis` (0: rows, 1: columns of a [rows, cols]
// tensor; a 1-D tensor has only axis 0) is `groups` equal groups, each cut into T equal parts; rank
// t holds part t of every group, in group order. axis -1: replicated.
struct ParamShard {
  int axis = -1;
  int groups = 1;
};

enum class ShardRole {
  kReplicated,  // Whole on every rank.
  kColumn,      // mlp: output features split.
  kRow,         // mlp: input features split (the input comes split).
  kRowSliced,   // mlp: input features split, each rank slicing the whole input itself.
  kBlock,       // vit, gpt, llama: a transformer block, heads and MLP split.
};

struct LayerShard {
  ShardRole role = ShardRole::kReplicated;
  std::vector<ParamShard> params;  // One per parameter of the layer's layout.
};

// The roles of layers `range` of `model` split `parts` ways (parts == 1: all replicated).
std::vector<LayerShard> SplitLayers(const ModelSpec& model, LayerRange range, int parts);

// InvalidArgument (naming the layer and size) unless every split dimension of `range` divides by
// `parts`.
absl::Status CheckTensorSplit(const ModelSpec& model, LayerRange range, int parts);

// The layout a rank holds: `full` with every split dimension divided by `parts` (and the in/out
// shapes of column and row layers accordingly).
LayerLayout ShardLayout(const LayerLayout& full, const LayerShard& shard, int parts);

// Rank `index`'s shard of a parameter (`full`: its whole tensor, `shape` its full shape) into
// `local` (numel / parts floats, or numel when replicated).
void TakeShard(const float* full, const std::vector<int64_t>& shape, ParamShard shard, int parts,
               int index, float* local);
// The inverse: writes rank `index`'s `local` into its place in `full`.
void PutShard(const float* local, const std::vector<int64_t>& shape, ParamShard shard, int parts,
              int index, float* full);

}  // namespace strait
