#include "crypto/deny_list.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace strait::crypto {

std::string NormalizeSerial(absl::string_view serial) {
  serial = absl::StripAsciiWhitespace(serial);
  if (!absl::ConsumePrefix(&serial, "0x")) absl::ConsumePrefix(&serial, "0X");
  std::string out;
  bool any_digit = false;
  for (char c : serial) {
    if (c == ':') continue;
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return "";
    any_digit = true;
    if (out.empty() && c == '0') continue;
    out += absl::ascii_tolower(static_cast<unsigned char>(c));
  }
  // A serial of zero is still a serial; its digits were all skipped as leading zeros.
  if (out.empty() && any_digit) out = "0";
  return out;
}

absl::StatusOr<DenyList> DenyList::Parse(absl::string_view text, absl::string_view name) {
  DenyList list;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = line.substr(0, line.find('#'));
    line = absl::StripAsciiWhitespace(line);
    absl::ConsumePrefix(&line, "serial:");
    if (line.empty()) continue;
    std::string serial = NormalizeSerial(line);
    if (serial.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ":", line_number,
                       ": expected a certificate serial number in hex, found '", line, "'"));
    }
    list.serials_.insert(std::move(serial));
  }
  return list;
}

absl::StatusOr<DenyList> DenyList::Load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read deny list ", path));
  std::stringstream text;
  text << in.rdbuf();
  return Parse(text.str(), path);
}

bool DenyList::IsRevoked(absl::string_view serial_hex) const {
  const std::string serial = NormalizeSerial(serial_hex);
  return !serial.empty() && serials_.count(serial) > 0;
}

}  // namespace strait::crypto
