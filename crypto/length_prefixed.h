// The length-prefixed encoding that key derivations and signatures bind their context with: a
// 32-bit big-endian integer, or a field as its 32-bit big-endian length then its bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/strings/string_view.h"

namespace strait::crypto {

inline void AppendU32(std::string* out, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(value >> shift));
}

inline void AppendField(std::string* out, absl::string_view bytes) {
  AppendU32(out, static_cast<uint32_t>(bytes.size()));
  out->append(bytes.data(), bytes.size());
}

inline absl::string_view AsString(std::span<const uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

}  // namespace strait::crypto
