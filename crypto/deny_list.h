// The revocation list the gateway reads (TlsSpec.deny_list): serial numbers of certificates that
// must no longer be accepted, one per line, in hex as `strait certs show` prints them
// ("serial: 3F:A2:..." or "3fa2..."; colons, a 0x prefix, case and leading zeros do not matter).
// Blank lines and text after '#' are ignored.
#pragma once

#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace strait::crypto {

// Immutable after construction, so concurrent readers need no lock; to update it the owner loads a
// new one and swaps it in.
class DenyList {
 public:
  DenyList() = default;  // Revokes nothing.

  // Parses the text of a deny-list file; `name` is used in error messages (name:line).
  static absl::StatusOr<DenyList> Parse(absl::string_view text, absl::string_view name);
  // Reads and parses `path`. Fails with kNotFound when the file does not exist.
  static absl::StatusOr<DenyList> Load(const std::string& path);

  // Whether the certificate with this serial number (hex, any of the spellings above) is revoked.
  bool IsRevoked(absl::string_view serial_hex) const;

  size_t size() const { return serials_.size(); }

 private:
  std::set<std::string> serials_;  // Normalised: lower-case hex, no colons, no leading zeros.
};

// Normalises a hex serial number as above; empty when `serial` is not hex.
std::string NormalizeSerial(absl::string_view serial);

}  // namespace strait::crypto
