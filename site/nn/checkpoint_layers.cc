#include "site/nn/checkpoint_layers.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/model_layout.h"
#include "core/status.h"
#include "plan/split_planner.h"
#include "site/nn/stage.h"

namespace strait::site {
namespace {

// "[first, end)"
std::string Range(int32_t first, int32_t end) { return plan::SplitToString({{first, end}}); }

// Offsets of the model's layers in a weight array of layers [first, end): offsets[i - first] is
// layer i's first float, offsets.back() the array's size.
std::vector<int64_t> LayerOffsets(const ModelSpec& model, int first, int end) {
  const std::vector<LayerLayout> layout = BuildModelLayout(model);
  std::vector<int64_t> offsets = {0};
  for (int i = first; i < end; ++i) {
    int64_t floats = 0;
    for (const ParamLayout& p : layout[i].params) floats += p.numel;
    offsets.push_back(offsets.back() + floats);
  }
  return offsets;
}

// Optimizer-state arrays of `kind` (site/nn/optimizer.h): one for SGD, two for AdamW.
int StateArrays(uint32_t kind) {
  return kind == static_cast<uint32_t>(OptimizerKind::kSgd) ? 1 : 2;
}

// Whether the arrays of `s` have the sizes of its layers.
absl::Status CheckSizes(const CheckpointState& s, const std::vector<int64_t>& offsets,
                        const std::string& what) {
  const auto n = static_cast<size_t>(offsets.back());
  const bool two = s.weight_versions == 2;
  if (s.params.size() != n || s.previous_params.size() != (two ? n : 0) ||
      (!s.lookahead_params.empty() && s.lookahead_params.size() != n) ||
      s.optimizer_state.size() != n * StateArrays(s.optimizer_kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " of layers ", Range(s.first_layer, s.end_layer), " holds ",
                     s.params.size(), " parameters and ", s.optimizer_state.size(),
                     " optimizer-state floats; the model's layers ", "have ", n, " parameters"));
  }
  return absl::OkStatus();
}

// Appends floats [from, to) of each of the `arrays` equal parts of `src` to `dst`, in order.
void AppendParts(const std::vector<float>& src, int arrays, int64_t from, int64_t to,
                 std::vector<float>& dst) {
  if (src.empty()) return;
  const auto part = static_cast<int64_t>(src.size()) / arrays;
  for (int a = 0; a < arrays; ++a) {
    dst.insert(dst.end(), src.begin() + a * part + from, src.begin() + a * part + to);
  }
}

// Interleaves `parts` (each of `arrays` equal parts) into one array of `arrays` parts.
std::vector<float> JoinParts(const std::vector<const std::vector<float>*>& parts, int arrays) {
  std::vector<float> out;
  for (int a = 0; a < arrays; ++a) {
    for (const std::vector<float>* p : parts) {
      const auto part = static_cast<int64_t>(p->size()) / arrays;
      out.insert(out.end(), p->begin() + a * part, p->begin() + (a + 1) * part);
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<CheckpointState> CutLayers(const CheckpointState& state, const ModelSpec& model,
                                          LayerRange layers) {
  if (state.first_layer < 0 || state.end_layer > model.NumLayers() ||
      layers.start < state.first_layer || layers.end > state.end_layer ||
      layers.start >= layers.end) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot cut layers ", Range(layers.start, layers.end),
                     " from a checkpoint of ", Range(state.first_layer, state.end_layer)));
  }
  const std::vector<int64_t> offsets = LayerOffsets(model, state.first_layer, state.end_layer);
  STRAIT_RETURN_IF_ERROR(CheckSizes(state, offsets, "the checkpoint"));
  const int64_t from = offsets[layers.start - state.first_layer];
  const int64_t to = offsets[layers.end - state.first_layer];
  CheckpointState cut = state;
  cut.first_layer = layers.start;
  cut.end_layer = layers.end;
  cut.fingerprint = StageFingerprint(model, layers);
  cut.params.clear(), cut.previous_params.clear(), cut.lookahead_params.clear();
  cut.optimizer_state.clear();
  AppendParts(state.params, 1, from, to, cut.params);
  AppendParts(state.previous_params, 1, from, to, cut.previous_params);
  AppendParts(state.lookahead_params, 1, from, to, cut.lookahead_params);
  AppendParts(state.optimizer_state, StateArrays(state.optimizer_kind), from, to,
              cut.optimizer_state);
  return cut;
}

absl::StatusOr<CheckpointState> JoinLayers(const std::vector<CheckpointState>& parts,
                                           const ModelSpec& model) {
  if (parts.empty()) return absl::InvalidArgumentError("no layers to join");
  const CheckpointState& first = parts.front();
  std::vector<const std::vector<float>*> params, previous, lookahead, state;
  for (size_t i = 0; i < parts.size(); ++i) {
    const CheckpointState& p = parts[i];
    const std::string what = absl::StrCat("the part of layers ", Range(p.first_layer, p.end_layer));
    auto refuse = [&](const std::string& why) {
      return absl::FailedPreconditionError(absl::StrCat(what, " does not fit: ", why));
    };
    if (i > 0 && p.first_layer != parts[i - 1].end_layer) {
      return refuse(absl::StrCat("the layers before it end at ", parts[i - 1].end_layer));
    }
    if (p.first_layer < 0 || p.end_layer > model.NumLayers() || p.first_layer >= p.end_layer) {
      return refuse(absl::StrCat("the model has layers [0, ", model.NumLayers(), ")"));
    }
    if (p.step != first.step || p.optimizer_kind != first.optimizer_kind ||
        p.init_seed != first.init_seed || p.data_seed != first.data_seed ||
        p.weight_versions != first.weight_versions ||
        p.lookahead_params.empty() != first.lookahead_params.empty() ||
        p.lagged_clip_scale != first.lagged_clip_scale) {
      return refuse(absl::StrCat("it was saved at step ", p.step,
                                 " of another run or schedule than ", "the first part (step ",
                                 first.step, ")"));
    }
    if (p.fingerprint != StageFingerprint(model, {p.first_layer, p.end_layer})) {
      return refuse("its fingerprint is not that of the model's layers");
    }
    STRAIT_RETURN_IF_ERROR(CheckSizes(p, LayerOffsets(model, p.first_layer, p.end_layer), what));
    params.push_back(&p.params), previous.push_back(&p.previous_params);
    lookahead.push_back(&p.lookahead_params), state.push_back(&p.optimizer_state);
  }
  CheckpointState joined = first;
  joined.end_layer = parts.back().end_layer;
  joined.fingerprint = StageFingerprint(model, {joined.first_layer, joined.end_layer});
  joined.params = JoinParts(params, 1);
  joined.previous_params = JoinParts(previous, 1);
  joined.lookahead_params = JoinParts(lookahead, 1);
  joined.optimizer_state = JoinParts(state, StateArrays(first.optimizer_kind));
  return joined;
}

std::vector<float> LayerPartToFloats(const CheckpointState* part) {
  if (part == nullptr) return {0.0f, 0.0f};
  std::vector<float> out = {static_cast<float>(part->first_layer),
                            static_cast<float>(part->end_layer)};
  for (const std::vector<float>* a :
       {&part->params, &part->previous_params, &part->lookahead_params, &part->optimizer_state}) {
    out.insert(out.end(), a->begin(), a->end());
  }
  return out;
}

absl::StatusOr<std::optional<CheckpointState>> LayerPartFromFloats(
    const std::vector<float>& payload, const CheckpointState& like, const ModelSpec& model) {
  const int layers = model.NumLayers();
  if (payload.size() < 2 || payload[0] != std::floor(payload[0]) ||
      payload[1] != std::floor(payload[1]) || payload[0] < 0 || payload[1] > layers ||
      payload[0] > payload[1]) {
    return absl::InvalidArgumentError("its first two values are not a range of the model's layers");
  }
  const int first = static_cast<int>(payload[0]), end = static_cast<int>(payload[1]);
  if (first == end) {
    if (payload.size() != 2) return absl::InvalidArgumentError("an empty part carries values");
    return std::nullopt;
  }
  int64_t n = 0;
  const std::vector<LayerLayout> layout = BuildModelLayout(model);
  for (int i = first; i < end; ++i) {
    for (const ParamLayout& p : layout[i].params) n += p.numel;
  }
  if (like.params.empty()) return absl::InvalidArgumentError("no checkpoint to take the part into");
  const int64_t weights =
      1 + (like.previous_params.empty() ? 0 : 1) + (like.lookahead_params.empty() ? 0 : 1);
  const int64_t state = static_cast<int64_t>(like.optimizer_state.size() / like.params.size());
  if (static_cast<int64_t>(payload.size()) != 2 + n * (weights + state)) {
    return absl::InvalidArgumentError(absl::StrCat("layers ", Range(first, end), " take ",
                                                   2 + n * (weights + state), " values, not ",
                                                   payload.size()));
  }
  CheckpointState part = like;
  part.first_layer = first, part.end_layer = end;
  part.fingerprint = StageFingerprint(model, {first, end});
  auto next = payload.begin() + 2;
  auto take = [&next](std::vector<float>& out, int64_t count) {
    out.assign(next, next + count);
    next += count;
  };
  take(part.params, n);
  take(part.previous_params, like.previous_params.empty() ? 0 : n);
  take(part.lookahead_params, like.lookahead_params.empty() ? 0 : n);
  take(part.optimizer_state, n * state);
  return part;
}

}  // namespace strait::site
