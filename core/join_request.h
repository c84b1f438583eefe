// The JoinRequest a site sends (proto strait.v1.JoinRequest), built from the job spec so that what
// a site claims always matches what the gateway checks it against.
#pragma once

#include "core/job_spec.h"
#include "core/job_view.h"
#include "strait/v1/gateway.pb.h"

namespace strait {

// Federation, the layers of `stage` in `view`, device and workers of `spec.sites[stage]` and the
// job's AgreedJobText (with the view's split planned or not), with `key` (its site_id must be the
// site's id and its epoch the join's). `stage` must be a valid index. The caller sets total_steps
// (it needs the data set's size when the job counts epochs).
v1::JoinRequest JoinRequestFor(const JobSpec& spec, const JobView& view, int stage,
                               v1::SignedKey key);
// The same with the split as the file writes it (JobView::Initial).
v1::JoinRequest JoinRequestFor(const JobSpec& spec, int stage, v1::SignedKey key);

// A teacher site's: teacher stage `teacher_stage`'s layers, device and workers (knowledge sharing).
v1::JoinRequest TeacherJoinRequest(const JobSpec& spec, int teacher_stage, v1::SignedKey key);

// A key carrying only the site id and epoch, no signature: for tests and benchmarks that join as a
// site (over mutual TLS) but seal nothing. Neighbours refuse it for a sealed link.
v1::SignedKey UnsignedKey(const std::string& site_id, uint32_t epoch);

}  // namespace strait
