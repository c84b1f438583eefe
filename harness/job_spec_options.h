// The command-line options of `strait demo` and `strait bench e2e` that override a job spec.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "harness/job_spec_rewrite.h"

namespace strait::harness {

// Adds --steps (described by `steps_help`), --codec, --forward-codec, --backward-codec,
// --global-batch, --microbatches, --schedule, --extra-in-flight, --lookahead, --update,
// --stale-gradients, --grad-clip and --chunk-size to `cmd`, filling `overrides`, which must outlive
// the parsing.
void AddJobSpecOverrideOptions(CLI::App& cmd, JobSpecOverrides& overrides,
                               const std::string& steps_help);

}  // namespace strait::harness
