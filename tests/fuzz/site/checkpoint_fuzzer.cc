// Checkpoint files come from disk (possibly truncated or corrupt): decoding never crashes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "site/nn/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)strait::site::ParseCheckpoint(bytes);
  // Also with a valid checksum, so the fuzzer gets past the CRC into the length checks.
  if (size >= 4) {
    const uint32_t crc = strait::site::Crc32c(bytes.data(), size - 4);
    bytes.replace(size - 4, 4, reinterpret_cast<const char*>(&crc), 4);
    (void)strait::site::ParseCheckpoint(bytes);
  }
  return 0;
}
