// HKDF-SHA256 (RFC 5869), extract then expand, through OpenSSL's EVP_KDF.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace strait::crypto {

// Derives `length` bytes (at most 255 * 32) from input keying material `ikm` with `salt` (empty:
// a block of zeros, as in the RFC) and context `info`. Thread-safe; the caller owns (and should
// wipe) the output.
absl::StatusOr<std::vector<uint8_t>> HkdfSha256(std::span<const uint8_t> ikm,
                                                std::span<const uint8_t> salt,
                                                std::span<const uint8_t> info, size_t length);

}  // namespace strait::crypto
