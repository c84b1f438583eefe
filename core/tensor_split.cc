#include "core/tensor_split.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace strait {
namespace {

constexpr ParamShard kWhole{};
constexpr ParamShard kRows{0, 1};
constexpr ParamShard kCols{1, 1};
constexpr ParamShard kQkvRows{0, 3};  // q, k and v each split by head.

// Parameter order of a transformer block (core/model_layout.cc): ln1.{gamma,beta},
// attn.qkv.{weight,bias}, attn.proj.{weight,bias}, ln2.{gamma,beta}, mlp.fc1.{weight,bias},
// mlp.fc2.{weight,bias}.
std::vector<ParamShard> BlockShards() {
  return {kWhole, kWhole, kQkvRows, kQkvRows, kCols, kWhole,
          kWhole, kWhole, kRows,    kRows,    kCols, kWhole};
}

// A llama block (core/model_layout.cc): attn_norm.gamma, attn.{q,k,v,o}.weight,
// mlp_norm.gamma, mlp.{gate,up,down}.weight. q, k and v split by (query or key/value) head, gate
// and up by column: each rank's q, k, v (and gate, up) still follow each other in its arena.
std::vector<ParamShard> LlamaBlockShards() {
  return {kWhole, kRows, kRows, kRows, kCols, kWhole, kRows, kRows, kCols};
}

bool IsBlock(const ModelSpec& model, int layer) {
  return model.family != ModelFamily::kMlp && layer > 0 && layer < model.NumLayers() - 1;
}

// Calls fn(offset_in_full, offset_in_local, count) for every contiguous run of a shard.
template <class Fn>
void ForEachRun(const std::vector<int64_t>& shape, ParamShard s, int parts, int index, Fn fn) {
  if (s.axis < 0) {
    fn(0, 0, NumElements(shape));
    return;
  }
  const int64_t rows = shape[0], cols = shape.size() > 1 ? shape[1] : 1;
  const int64_t dim = s.axis == 0 ? rows : cols;
  const int64_t group = dim / s.groups, part = group / parts;
  int64_t local = 0;
  if (s.axis == 0) {  // Whole rows: one run per group.
    for (int g = 0; g < s.groups; ++g) {
      fn((g * group + index * part) * cols, local, part * cols);
      local += part * cols;
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {  // Columns: one run per row and group.
    for (int g = 0; g < s.groups; ++g) {
      fn(r * cols + g * group + index * part, local, part);
      local += part;
    }
  }
}

}  // namespace

std::vector<LayerShard> SplitLayers(const ModelSpec& model, LayerRange range, int parts) {
  const std::vector<LayerLayout> layout = BuildModelLayout(model);
  std::vector<LayerShard> out;
  for (int i = range.start; i < range.end; ++i) {
    LayerShard s;
    s.params.assign(layout[i].params.size(), kWhole);
    if (parts > 1 && model.family == ModelFamily::kMlp) {
      const int k = i - range.start;
      if (k % 2 == 1) {
        s.role = ShardRole::kRow;
      } else {
        s.role = i + 1 < range.end ? ShardRole::kColumn : ShardRole::kRowSliced;
      }
      // weight [out, in], bias [out]: a column layer splits both by output; a row layer splits the
      // weight's input columns and keeps the bias whole.
      s.params = s.role == ShardRole::kColumn ? std::vector<ParamShard>{kRows, kRows}
                                              : std::vector<ParamShard>{kCols, kWhole};
    } else if (parts > 1 && IsBlock(model, i)) {
      s.role = ShardRole::kBlock;
      s.params = model.family == ModelFamily::kLlama ? LlamaBlockShards() : BlockShards();
    }
    out.push_back(std::move(s));
  }
  return out;
}

absl::Status CheckTensorSplit(const ModelSpec& model, LayerRange range, int parts) {
  if (parts <= 1) return absl::OkStatus();
  const std::vector<LayerLayout> layout = BuildModelLayout(model);
  const std::vector<LayerShard> shards = SplitLayers(model, range, parts);
  for (int i = range.start; i < range.end; ++i) {
    const LayerShard& s = shards[i - range.start];
    for (size_t p = 0; p < s.params.size(); ++p) {
      const ParamShard ps = s.params[p];
      if (ps.axis < 0) continue;
      const ParamLayout& param = layout[i].params[p];
      const int64_t dim = param.shape[ps.axis];
      if (dim % (int64_t{ps.groups} * parts) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layer ", i, " (", layout[i].name, "): ", param.name, " ", ShapeToString(param.shape),
            " does not split ", parts, " ways along its ", ps.axis == 0 ? "rows" : "columns", " (",
            dim / ps.groups, " is not divisible by ", parts, ")"));
      }
    }
    if (s.role == ShardRole::kBlock) {
      const int heads = model.family == ModelFamily::kVit ? model.vit.heads : model.gpt.heads;
      if (heads % parts != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", i, " (", layout[i].name, "): ", heads,
                         " attention heads do not split ", parts, " ways"));
      }
      if (model.family == ModelFamily::kLlama && model.gpt.KeyValueHeads() % parts != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("layer ", i, " (", layout[i].name, "): ", model.gpt.KeyValueHeads(),
                         " key/value heads (model.kv_heads) do not split ", parts, " ways"));
      }
    }
  }
  return absl::OkStatus();
}

LayerLayout ShardLayout(const LayerLayout& full, const LayerShard& shard, int parts) {
  LayerLayout local = full;
  if (parts <= 1 || shard.role == ShardRole::kReplicated) return local;
  local.param_count = 0;
  for (size_t p = 0; p < local.params.size(); ++p) {
    ParamLayout& param = local.params[p];
    if (shard.params[p].axis >= 0) param.shape[shard.params[p].axis] /= parts;
    param.numel = NumElements(param.shape);
    local.param_count += param.numel;
  }
  if (shard.role == ShardRole::kColumn) local.out_shape.back() /= parts;
  if (shard.role == ShardRole::kRow) local.in_shape.back() /= parts;
  local.forward_flops = full.forward_flops / parts;
  return local;
}

void TakeShard(const float* full, const std::vector<int64_t>& shape, ParamShard shard, int parts,
               int index, float* local) {
  ForEachRun(shape, shard, parts, index, [&](int64_t from, int64_t to, int64_t n) {
    std::memcpy(local + to, full + from, sizeof(float) * n);
  });
}

void PutShard(const float* local, const std::vector<int64_t>& shape, ParamShard shard, int parts,
              int index, float* full) {
  ForEachRun(shape, shard, parts, index, [&](int64_t to, int64_t from, int64_t n) {
    std::memcpy(full + to, local + from, sizeof(float) * n);
  });
}

}  // namespace strait
