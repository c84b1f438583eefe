#include "gateway/membership/authorizer.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/tensor_key.h"

namespace strait::gateway {
namespace {

absl::Status CheckRole(const JobSpec& spec, int site, const v1::TensorKey& key, int owner,
                       const char* action, const char* role) {
  STRAIT_RETURN_IF_ERROR(ValidateTensorKey(key, spec));
  if (owner != site) {
    return absl::PermissionDeniedError(absl::StrCat("site '", spec.sites[site].id, "' may not ",
                                                    action, " ", TensorKeyToString(key), ": its ",
                                                    role, " is '", spec.sites[owner].id, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> StageOfSite(const JobSpec& spec, const std::string& site_id) {
  int index = spec.SiteIndex(site_id);
  if (index < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("'", site_id, "' is not a site of federation '", spec.name, "'"));
  }
  return index;
}

absl::Status CheckPush(const JobSpec& spec, int site, const v1::TensorKey& key) {
  return CheckRole(spec, site, key, ProducerStage(key, static_cast<int>(spec.sites.size())), "push",
                   "producer");
}

absl::Status CheckPull(const JobSpec& spec, int site, const v1::TensorKey& key) {
  return CheckRole(spec, site, key, ConsumerStage(key, static_cast<int>(spec.sites.size())), "pull",
                   "consumer");
}

}  // namespace strait::gateway
