#include "core/job_agreement.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/job_fields.h"

namespace strait {

std::string AgreedJobText(const JobSpec& spec, bool split_planned) {
  std::string out;
  for (const AgreedLine& line : AgreedLines()) line.append(spec, split_planned, out);
  return out;
}

std::string FirstDisagreement(absl::string_view ours, absl::string_view theirs,
                              absl::string_view ours_name) {
  const std::vector<absl::string_view> a = absl::StrSplit(ours, '\n', absl::SkipEmpty());
  const std::vector<absl::string_view> b = absl::StrSplit(theirs, '\n', absl::SkipEmpty());
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const absl::string_view x = i < a.size() ? a[i] : "(nothing)";
    const absl::string_view y = i < b.size() ? b[i] : "(nothing)";
    if (x == y) continue;
    // "key: theirs (name: ours)", the key once when both lines have it.
    const size_t key_end = x.find(": ");
    if (key_end != absl::string_view::npos &&
        y.substr(0, key_end + 2) == x.substr(0, key_end + 2)) {
      return absl::StrCat(y, " (", ours_name, ": ", x.substr(key_end + 2), ")");
    }
    return absl::StrCat(y, " (", ours_name, ": ", x, ")");
  }
  return "";
}

}  // namespace strait
