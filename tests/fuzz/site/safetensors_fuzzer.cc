// A safetensors file comes from anywhere (a download, another tool, a disk that lost a sector):
// whatever its bytes, reading it returns an error or tensors whose values match their shapes,
// never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "site/nn/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view file(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<strait::site::NamedTensor>> read =
      strait::site::DecodeSafetensors(file);
  if (!read.ok()) return 0;
  for (const strait::site::NamedTensor& t : *read) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<uint64_t>(d);
    if (numel != t.values.size()) std::abort();
  }
  return 0;
}
