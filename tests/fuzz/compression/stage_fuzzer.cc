// Each stage decoder on its own, without the frame header in the way: byte 0 picks the stage and
// its parameters, bytes 1-2 the element count, the rest is the stage's encoded input; for proj and
// klt, byte 3 is the row width and the input starts at byte 4.
#include <cstdint>
#include <vector>

#include "compression/codec_stage.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace strait::compression;
  if (size < 3) return 0;
  static const StageSpec kStages[] = {
      {.kind = StageKind::kNone},
      {.kind = StageKind::kFp16},
      {.kind = StageKind::kBf16},
      {.kind = StageKind::kInt8},
      {.kind = StageKind::kInt8, .block_size = 2},
      {.kind = StageKind::kInt4},
      {.kind = StageKind::kInt4, .block_size = 6},
      {.kind = StageKind::kTopK, .fraction = 0.01},
      {.kind = StageKind::kShuffle, .width = 4},
      {.kind = StageKind::kShuffle, .width = 2},
      {.kind = StageKind::kZstd},
      {.kind = StageKind::kProject, .subspace = 4, .basis_seed = 1},
      {.kind = StageKind::kProject, .subspace = 16},
      {.kind = StageKind::kKlt, .step = 0.1},
      {.kind = StageKind::kKlt, .stochastic = true, .step = 1.0},
      {.kind = StageKind::kKlt, .stochastic = true, .step = 0.5, .dithered = true},
  };
  const StageSpec& spec = kStages[data[0] % (sizeof(kStages) / sizeof(kStages[0]))];
  const uint64_t n = data[1] | (uint64_t{data[2]} << 8);
  std::unique_ptr<CodecStage> stage = MakeCodecStage(spec);
  const bool project = spec.kind == StageKind::kProject || spec.kind == StageKind::kKlt;
  if (project && size < 4) return 0;
  if (project) stage->SetRowWidth(data[3]);
  absl::Span<const uint8_t> in(data + (project ? 4 : 3), size - (project ? 4 : 3));
  // Byte stages decode to any size; let the count be the byte count, as a chain would.
  const uint64_t decoded = IsValueStage(spec.kind) || project ? 4 * n : n;
  if (!stage->CheckSizes(decoded, in.size()).ok()) return 0;
  std::vector<float> out((decoded + 3) / 4);
  (void)stage->Decode(in, absl::MakeSpan(reinterpret_cast<uint8_t*>(out.data()), decoded));
  return 0;
}
