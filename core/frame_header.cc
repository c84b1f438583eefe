#include "core/frame_header.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "compression/chain_spec.h"
#include "core/model_layout.h"
#include "core/status.h"
#include "core/tensor_key.h"
#include "core/tied_embeddings.h"

namespace strait {
namespace {

bool LinksUseKlt(const JobSpec& spec) {
  for (const LinkSpec& link : spec.links) {
    for (const std::string& chain : {link.forward, link.backward}) {
      absl::StatusOr<compression::ChainSpec> parsed = compression::ParseChainSpec(chain);
      if (parsed.ok() && parsed->stages[0].kind == compression::StageKind::kKlt) return true;
    }
  }
  return false;
}

}  // namespace

uint64_t MaxFrameWireBytes(const JobSpec& spec) {
  const std::vector<LayerLayout> layers = BuildModelLayout(spec.model);
  uint64_t largest = 0;
  // A planned split (layers: auto) may cut after any layer but the last.
  std::vector<int> cuts;
  for (size_t s = 0; s + 1 < spec.sites.size(); ++s) {
    if (!spec.SplitMayMove()) cuts.push_back(spec.sites[s].layers.end - 1);
  }
  for (size_t k = 0; spec.SplitMayMove() && k + 1 < layers.size(); ++k) cuts.push_back(k);
  const bool klt = LinksUseKlt(spec);
  for (int k : cuts) {
    const uint64_t elements = NumElements(layers[k].out_shape) * spec.training.MicrobatchSize();
    const uint64_t width = layers[k].out_shape.back();
    // klt: its symbols (at most 6 bytes a value), a table a column group and the basis.
    largest = std::max<uint64_t>(largest, klt ? 6 * elements + 2 * width * width + 5 * width +
                                                    compression::kMaxKltTablesBytes
                                              : elements * sizeof(float));
  }
  if (const std::optional<TiedMatrix> tied = TiedMatrixOf(spec.model)) {
    largest = std::max<uint64_t>(largest, tied->numel * sizeof(float));  // The TIED frames.
  }
  if (spec.SplitMayMove())
    largest = std::max<uint64_t>(largest, MaxMoveFloats(spec) * sizeof(float));
  largest = std::max<uint64_t>(largest, MaxSumWords(spec) * sizeof(uint32_t));
  // zstd's worst case is well under 1/128 extra; headers and the tag fit in 64 KiB.
  return largest + largest / 128 + (64 << 10);
}

uint64_t MaxSumWords(const JobSpec& spec) {
  if (spec.Replicas() < 2) return 0;
  const std::vector<LayerLayout> layers = BuildModelLayout(spec.model);
  uint64_t largest = 0;
  for (const SiteSpec& site : spec.sites) {
    uint64_t params = 0;
    for (int i = site.layers.start; i < site.layers.end; ++i) params += layers[i].param_count;
    largest = std::max(largest, params);
  }
  return largest;
}

uint64_t MaxMoveFloats(const JobSpec& spec) {
  uint64_t params = 0;
  for (const LayerLayout& layer : BuildModelLayout(spec.model)) {
    for (const ParamLayout& p : layer.params) params += static_cast<uint64_t>(p.numel);
  }
  const TrainingSpec& t = spec.training;
  const uint64_t weights = t.schedule != Schedule::k2BW ? 1 : (t.lookahead > 0 ? 3 : 2);
  const uint64_t state = t.optimizer.kind == OptimizerKind::kSgd ? 1 : 2;
  return 2 + params * (weights + state);
}

FramePieces CutIntoPieces(uint64_t wire_bytes, uint64_t chunk_bytes) {
  const uint64_t chunk = std::clamp<uint64_t>(chunk_bytes, 1, kMaxChunkBytes);
  const uint64_t limit = std::min(kMaxChunkBytes, chunk + chunk / 64);
  const uint64_t count = std::max<uint64_t>(1, (wire_bytes + limit - 1) / limit);
  return {.count = static_cast<uint32_t>(count),
          .bytes = std::max<uint64_t>(1, (wire_bytes + count - 1) / count)};
}

absl::Status ValidateFrameHeader(const v1::FrameHeader& header, const JobSpec& spec,
                                 uint64_t max_frame_bytes) {
  if (!header.has_key()) return absl::InvalidArgumentError("frame header has no key");
  STRAIT_RETURN_IF_ERROR(ValidateTensorKey(header.key(), spec));
  const bool bytes = header.dtype() == v1::BYTES && header.key().purpose() == v1::TEACH;
  if (header.dtype() != v1::FLOAT32 && !bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame header has dtype ", header.dtype(),
                     "; expected FLOAT32 (BYTES: TEACH frames only)"));
  }
  if (header.shape_size() < 1 || header.shape_size() > 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame header has ", header.shape_size(), " dimensions; expected 1 to 8"));
  }
  // Accumulate in unsigned arithmetic, refusing before anything can overflow.
  uint64_t elements = 1;
  for (int64_t dim : header.shape()) {
    if (dim < 1 || static_cast<uint64_t>(dim) > max_frame_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("frame header has dimension ", dim));
    }
    elements *= static_cast<uint64_t>(dim);
    if (elements > (uint64_t{1} << 40)) {
      return absl::InvalidArgumentError("frame header describes a tensor of over 2^40 elements");
    }
  }
  const uint64_t element_bytes = bytes ? 1 : sizeof(float);
  if (header.raw_bytes() != elements * element_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("frame header says raw_bytes ",
                                                   header.raw_bytes(), " but its shape holds ",
                                                   elements * element_bytes));
  }
  if (header.wire_bytes() > max_frame_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame of ", header.wire_bytes(), " wire bytes exceeds the limit of ", max_frame_bytes));
  }
  const uint64_t min_chunks =
      std::max<uint64_t>(1, (header.wire_bytes() + kMaxChunkBytes - 1) / kMaxChunkBytes);
  const uint64_t max_chunks = std::max<uint64_t>(1, header.wire_bytes());
  if (header.chunk_count() < min_chunks || header.chunk_count() > max_chunks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame header has chunk_count ", header.chunk_count(), " for ", header.wire_bytes(),
        " wire bytes; expected ", min_chunks, " to ", max_chunks));
  }
  return absl::OkStatus();
}

}  // namespace strait
