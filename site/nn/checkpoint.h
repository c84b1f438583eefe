// Checkpoint files: one stage's parameters, optimizer state, RNG state and step.
//
// Format (little-endian), version 1 (one weight version: schedules 1f1b and gpipe):
//   "STRAITCK" | u32 version | u32 optimizer kind | i64 step | u64 fingerprint (Stage::Fingerprint)
//   | i32 first layer | i32 end layer | u64 init seed | u64 data seed | u64 param floats
//   | u64 optimizer-state floats | params (f32) | optimizer state (f32) | u32 CRC32C of all before.
// Version 2 (two weight versions: schedule 2bw) inserts after the optimizer-state count
//   | u32 weight arrays (2, or 3 with lookahead)
// and after the params (the newest weights L_step) what microbatches of L_{step-1} compute with
// (L_{step-1}, or P_{step-1} with lookahead: site/pipeline/weight_history.h), then with lookahead
// P_step:
//   | previous params (f32, param floats of them) [| lookahead params (f32, as many)].
// Version 3 (2bw with update eager and grad_clip) is version 2 with, after the weight-array count,
//   | f32 lagged clip scale
// the scale the next update applies (CheckpointState::lagged_clip_scale).
// Files of one weight version are always written as version 1, byte for byte as before, and 2bw
// files without a clip scale as version 2.
// The RNG state is the pair of seeds: every random number is keyed by (seed, step, ...), so
// (seeds, step) is the whole state. Writes are atomic: a temporary file in the same directory is
// written, fsynced and renamed over the target, then the directory is fsynced.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/env.h"

namespace strait::site {

struct CheckpointState {
  int64_t step = 0;             // Global steps completed.
  uint32_t optimizer_kind = 0;  // static_cast<uint32_t>(OptimizerKind)
  uint64_t fingerprint = 0;
  int32_t first_layer = 0;
  int32_t end_layer = 0;
  uint64_t init_seed = 0;
  uint64_t data_seed = 0;
  uint32_t weight_versions = 1;         // 2: a 2bw run's, with previous_params.
  std::vector<float> params;            // The newest weights, L_step.
  std::vector<float> previous_params;   // weight_versions == 2: Stage::PreviousParams; else empty.
  std::vector<float> lookahead_params;  // 2bw with lookahead: Stage::LookaheadParams; else empty.
  std::vector<float> optimizer_state;
  // 2bw with update eager and grad_clip: the clipping scale the next update applies, from the
  // last step's global norm (core/schedule.h LaggedClip). Needs weight_versions 2.
  std::optional<float> lagged_clip_scale;
};

// The bytes of the checkpoint file of `state` (InvalidArgument when its arrays disagree with its
// weight versions).
absl::StatusOr<std::string> SerializeCheckpoint(const CheckpointState& state);

// Writes `state` to `path` atomically (Env::WriteFileAtomically). Blocks on disk I/O. Thread-safe
// for distinct paths.
absl::Status WriteCheckpoint(const std::string& path, const CheckpointState& state,
                             Env* env = Env::Default());

// Reads and verifies a checkpoint: a missing file is NotFound; a truncated, corrupt (checksum) or
// foreign file is DataLoss, with the reason. Thread-safe.
absl::StatusOr<CheckpointState> ReadCheckpoint(const std::string& path, Env* env = Env::Default());

// Decodes and verifies the bytes of a checkpoint file (DataLoss with the reason when they are not
// one); checks every length before reading. Thread-safe.
absl::StatusOr<CheckpointState> ParseCheckpoint(const std::string& data);

// CRC32C (Castagnoli) of `size` bytes, continuing from `crc` (0 to start).
uint32_t Crc32c(const void* data, size_t size, uint32_t crc = 0);

}  // namespace strait::site
