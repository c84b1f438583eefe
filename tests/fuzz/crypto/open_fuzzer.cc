// Opener::OpenInPlace on arbitrary bodies and header fields: bytes from the network (via the
// gateway). Must never crash or read out of bounds; every input is either opened or refused.
//
// Input: be64 sequence || be32 key_epoch || be32 declared sealed size || 1 byte AAD length || AAD
// || body.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "crypto/aead.h"

using namespace strait::crypto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 17) return 0;
  uint64_t sequence = 0;
  for (int i = 0; i < 8; ++i) sequence = sequence << 8 | data[i];
  const uint32_t epoch = data[8] << 24 | data[9] << 16 | data[10] << 8 | data[11];
  const uint32_t declared = data[12] << 24 | data[13] << 16 | data[14] << 8 | data[15];
  const size_t aad_size = std::min<size_t>(data[16], size - 17);
  std::vector<uint8_t> aad(data + 17, data + 17 + aad_size);
  std::vector<uint8_t> body(data + 17 + aad_size, data + size);
  DirectionKey key;  // All-zero key, epoch 0: fuzzed frames with epoch 0 reach the GCM check.
  auto opener = Opener::Create(key, 64);
  if (!opener.ok()) abort();
  auto opened = (*opener)->OpenInPlace({sequence, epoch, declared}, aad, body);
  if (!opened.ok() && !GetOpenError(opened.status())) abort();  // Every refusal is classified.
  return 0;
}
