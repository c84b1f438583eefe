// A microbatch's tensor at a stage boundary as a pass takes it in or hands it out: f32 in host
// memory, or the payload of a link codec's value stage (none, fp16, bf16, int8, int4), which the
// backend decodes and encodes where the tensor lives, so a GPU site copies the codec's bytes and
// never the f32 tensor (DESIGN.md §6; Backend::EncodeValues). Both views point to memory the caller
// owns for the duration of the call.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace strait::compression {
struct StageSpec;  // compression/chain_spec.h
}  // namespace strait::compression

namespace strait::site {

struct BoundaryIn {
  // Host floats (null: none). Implicit: most callers hand a pointer.
  BoundaryIn(const float* host = nullptr) : host(host) {}  // NOLINT(google-explicit-constructor)
  BoundaryIn(const compression::StageSpec& stage, absl::Span<const uint8_t> payload)
      : stage(&stage), payload(payload) {}

  bool encoded() const { return stage != nullptr; }
  bool empty() const { return host == nullptr && stage == nullptr; }

  const float* host = nullptr;
  const compression::StageSpec* stage = nullptr;  // Set: `payload` is what it wrote.
  absl::Span<const uint8_t> payload;
};

struct BoundaryOut {
  // Host floats (null: not wanted). Implicit, as above.
  BoundaryOut(float* host = nullptr) : host(host) {}  // NOLINT(google-explicit-constructor)
  // `stage` encodes the tensor into `payload` with stochastic-rounding seed `seed`.
  BoundaryOut(const compression::StageSpec& stage, uint64_t seed, std::vector<uint8_t>* payload)
      : stage(&stage), seed(seed), payload(payload) {}

  bool encoded() const { return stage != nullptr; }
  bool empty() const { return host == nullptr && stage == nullptr; }

  float* host = nullptr;
  const compression::StageSpec* stage = nullptr;
  uint64_t seed = 0;
  std::vector<uint8_t>* payload = nullptr;
};

}  // namespace strait::site
