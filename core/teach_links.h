// Knowledge sharing's links (docs/distillation.md): teacher stage t sends its residual stream to
// teacher stage t + 1, and the teacher's last stage its targets to the student's last stage (of the
// one pipeline a job with a teacher has), as TEACH frames (proto Purpose TEACH, key boundary t).
// Each link is lossless and always sealed, with keys derived for the purpose "teach" that only its
// two ends hold. The teacher runs ahead of the student, by at most kTeacherLeadSteps: the student's
// last stage tells the teacher's first stage which step's targets it has taken (a one-byte TEACH
// BACKWARD frame per step, boundary 0, microbatch 0: the pace), and the teacher's first stage
// starts step s once it has the pace of step s - kTeacherLeadSteps. So the teacher's frames in the
// gateway stay bounded: unbounded, they could fill its memory budget and starve the student's own
// frames, which would then never free it.
#pragma once

#include <vector>

#include "core/job_spec.h"

namespace strait {

// The purpose label of the teacher links' keys (LinkSecurity::Derive).
inline constexpr char kTeachKeyPurpose[] = "teach";
// Serving's (docs/distillation.md), followed by "/<request>": fresh keys for every request.
inline constexpr char kServeKeyPurpose[] = "serve";

// How many steps the teacher's first stage may run ahead of the student's last: enough to keep the
// targets of the next step waiting while the student computes this one over a slow link.
inline constexpr int kTeacherLeadSteps = 2;

// The member slots (JobSpec::MemberSlots) the member in `slot` shares a teacher link with: a
// teacher stage's previous teacher stage (if any) and its consumer (the next teacher stage, or the
// student's last site), and for the first teacher stage the student's last site (the pace); the
// student's last site's, the teacher's last and first stage; nobody else's. Without duplicates.
std::vector<int> TeachLinkPartners(const JobSpec& spec, int slot);

// The link's settings: no codec chain, sealed, rekeyed after the smallest rotate_bytes of the
// job's links.
LinkSpec TeachLink(const JobSpec& spec);

}  // namespace strait
