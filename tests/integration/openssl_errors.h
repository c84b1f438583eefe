// OpenSSL's error queue as text, for tests that make TLS handshakes by hand.
#pragma once

#include <openssl/err.h>

#include <string>

namespace strait::testing {

// Drains this thread's OpenSSL error queue: each reason followed by "; ".
inline std::string OpenSslErrors() {
  std::string out;
  for (unsigned long e; (e = ERR_get_error()) != 0;) {
    char buffer[256];
    ERR_error_string_n(e, buffer, sizeof(buffer));
    out += std::string(buffer) + "; ";
  }
  return out;
}

}  // namespace strait::testing
