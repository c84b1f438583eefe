// ParseJobSpec (core/job_spec_parser.h): `serving:`, the clients of a serving federation.
#include <set>

#include "absl/strings/str_cat.h"
#include "core/job_spec.h"
#include "core/job_spec_parser.h"
#include "core/status.h"
#include "core/yaml_reader.h"

namespace strait::job_spec_internal {

absl::Status JobSpecParser::ParseServing(YamlMap& root) {
  YamlMap map = Section(root, "serving");
  STRAIT_RETURN_IF_ERROR(map.status());
  if (!map.node().IsDefined()) return absl::OkStatus();
  if (!spec_.model.IsLanguageModel()) {
    return root.ErrorAt("serving", "serves sampled text: it needs a language model (gpt, llama)");
  }
  if (spec_.Replicas() > 1 || spec_.has_teacher) {
    return root.ErrorAt("serving", "a job with replicas or a teacher cannot serve yet");
  }
  const YAML::Node clients = map.Get("clients");
  if (!clients.IsDefined() || clients.IsNull()) {
    return map.Missing("clients", "the certificate ids that may ask, e.g. [alice]");
  }
  if (!clients.IsSequence() || clients.size() == 0 || clients.size() > 64) {
    return map.ErrorAt("clients", absl::StrCat("expected a list of 1 to 64 client ids, found ",
                                               DescribeYamlNode(clients)));
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < clients.size(); ++i) {
    const std::string id = clients[i].IsScalar() ? clients[i].Scalar() : "";
    const std::string at = absl::StrCat(map.path(), ".clients[", i, "]");
    if (!IsSiteId(id)) {
      return YamlError(file_, clients[i], at,
                       "expected a certificate id (1-63 lower-case letters, digits, '.', '_' or "
                       "'-'), found " +
                           DescribeYamlNode(clients[i]));
    }
    if (spec_.MemberSlot(id) >= 0 || !seen.insert(id).second) {
      return YamlError(file_, clients[i], at,
                       absl::StrCat("'", id,
                                    "' is a site's id or listed twice: a client has a "
                                    "certificate of its own"));
    }
    spec_.serving.clients.push_back(id);
  }
  return Finish(map);
}

}  // namespace strait::job_spec_internal
