// The safetensors format (Hugging Face's; what `transformers`, llama.cpp's converters and vLLM
// read): an 8-byte little-endian header length N, N bytes of a JSON object that maps each tensor's
// name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the end of the header) and
// may hold "__metadata__" (string to string), then the tensors' raw little-endian bytes, back to
// back with no holes. Strait writes F32 or BF16 and reads F32, F16 and BF16 as floats.
//
// The reader trusts nothing (a file may be truncated, corrupted or lie about its offsets): every
// refusal is DATA_LOSS naming what is wrong. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace strait::site {

enum class SafetensorsDtype { kF32, kBF16 };

struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;  // Row-major, numel(shape) of them.
};

// One tensor as a header describes it.
struct SafetensorsEntry {
  std::string dtype;  // "F32", "F16" or "BF16".
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // Byte offsets in the data section.
};

struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // Offset of the data section in the file: 8 + N.
};

// The largest header a reader accepts (the format's own limit).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// A whole file of `tensors` (names unique; values of numel(shape) each) as `dtype`, with
// `metadata`.
std::string EncodeSafetensors(const std::vector<NamedTensor>& tensors, SafetensorsDtype dtype,
                              const std::map<std::string, std::string>& metadata = {});

// The header's length N that a file's first 8 bytes give (little-endian), unchecked.
uint64_t SafetensorsHeaderLength(std::string_view first8);

// The header of a file of `file_size` bytes that begins with `prefix` (at least the 8-byte length
// and the header it gives; more is ignored).
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view prefix,
                                                         uint64_t file_size);

// The values of `entry` from its `bytes` (end - begin of them), as floats.
absl::StatusOr<std::vector<float>> DecodeSafetensorsTensor(const SafetensorsEntry& entry,
                                                           std::string_view bytes);

// A whole file in memory: its header and every tensor, decoded.
absl::StatusOr<std::vector<NamedTensor>> DecodeSafetensors(std::string_view file);

}  // namespace strait::site
