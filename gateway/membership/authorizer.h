// Who may push and pull which tensor (DESIGN.md §5): a site may push only the keys it produces and
// pull only the keys it consumes, by its place in the job (its stage, and with replicas its
// pipeline: JobSpec::SiteSlots). The site's identity comes from its verified client certificate,
// never from a message. Sums of replicas (proto Purpose SUM) have the gateway at one end: no site
// may push a sum or pull another site's masked vector.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "strait/v1/tensor.pb.h"

namespace strait::gateway {

// Member slot of `site_id` (JobSpec::MemberSlot: a student or a teacher site); PERMISSION_DENIED
// when the job has no such site.
absl::StatusOr<int> SlotOfSite(const JobSpec& spec, const std::string& site_id);

// OK when the key is valid for the job and its producer (CheckPush) or consumer (CheckPull) is the
// site in slot `site`; INVALID_ARGUMENT for a malformed key, PERMISSION_DENIED naming both sides
// otherwise.
absl::Status CheckPush(const JobSpec& spec, int site, const v1::TensorKey& key);
absl::Status CheckPull(const JobSpec& spec, int site, const v1::TensorKey& key);

}  // namespace strait::gateway
