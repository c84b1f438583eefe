// What every process of a federation must agree on for its sites to train one model, and for a
// lossless federation to reproduce `strait train`: the model, the data order, the training
// hyperparameters, the split and the links, as canonical text. A site sends it with its join and
// the gateway refuses a site whose job spec differs from its own, naming the first difference (each
// process loads its own copy of the file, and a site with another learning rate or update timing
// would otherwise train something else without a word).
//
// Which keys it carries and which it leaves out (addresses, paths, certificates, the dashboard,
// checkpoint and gateway settings, the run's length): the field table, core/job_fields.h.
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "core/job_spec.h"

namespace strait {

// One "key: value" line per setting, in a fixed order (AgreedLines); numbers exact.
// `split_planned`: the planner chose the split (core/job_view.h JobView::planned): every site's
// layers read "planned", as a re-plan may change them at a rollback.
std::string AgreedJobText(const JobSpec& spec, bool split_planned = false);

// The first line of `theirs` that differs from `ours`, as "KEY: THEIRS (OURS_NAME: OURS)", or a
// line that only one has; empty when they are equal.
std::string FirstDisagreement(absl::string_view ours, absl::string_view theirs,
                              absl::string_view ours_name);

}  // namespace strait
