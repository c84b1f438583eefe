#include "gateway/membership/authorizer.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/tensor_key.h"

namespace strait::gateway {
namespace {

absl::Status CheckRole(const JobSpec& spec, int site, const v1::TensorKey& key, bool produce) {
  STRAIT_RETURN_IF_ERROR(ValidateTensorKey(key, spec));
  const int owner = produce ? ProducerSlot(key, spec) : ConsumerSlot(key, spec);
  if (owner != site) {
    return absl::PermissionDeniedError(
        absl::StrCat("site '", spec.MemberIdAt(site), "' may not ", produce ? "push " : "pull ",
                     TensorKeyToString(key), ": its ", produce ? "producer" : "consumer", " is ",
                     owner < 0 ? "the gateway" : absl::StrCat("'", spec.MemberIdAt(owner), "'")));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> SlotOfSite(const JobSpec& spec, const std::string& site_id) {
  const int slot = spec.MemberSlot(site_id);
  if (slot < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("'", site_id, "' is not a site of federation '", spec.name, "'"));
  }
  return slot;
}

absl::Status CheckPush(const JobSpec& spec, int site, const v1::TensorKey& key) {
  return CheckRole(spec, site, key, /*produce=*/true);
}

absl::Status CheckPull(const JobSpec& spec, int site, const v1::TensorKey& key) {
  return CheckRole(spec, site, key, /*produce=*/false);
}

}  // namespace strait::gateway
