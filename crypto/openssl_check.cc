#include "crypto/openssl_check.h"

#include <openssl/err.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace strait::crypto {

absl::Status OpenSslError(absl::string_view call, const char* file, int line) {
  std::string reasons;
  const char* err_file = nullptr;
  int err_line = 0;
  // ERR_get_error_all also yields data strings; those can carry caller-supplied text, so only the
  // library's reason strings are kept.
  while (unsigned long code = ERR_get_error_all(&err_file, &err_line, nullptr, nullptr, nullptr)) {
    char buffer[256];
    ERR_error_string_n(code, buffer, sizeof(buffer));
    absl::StrAppend(&reasons, reasons.empty() ? "" : "; ", buffer);
  }
  if (reasons.empty()) reasons = "no OpenSSL error recorded";
  return absl::InternalError(absl::StrCat(file, ":", line, ": ", call, " failed: ", reasons));
}

}  // namespace strait::crypto
