// Logging set-up for the Strait executables (spdlog).
#pragma once

#include <string>

#include "absl/status/status.h"

namespace strait {

// Configures the default spdlog logger: coloured when stderr is a terminal, each line prefixed with
// time, level and `component` (e.g. "gateway" or "site dc-a"). `level` is one of trace, debug,
// info, warn, error, off. Call once at the start of main(); not thread-safe against concurrent
// logging.
absl::Status SetupLogging(const std::string& component, const std::string& level);

// A duration for progress lines and ETAs: "3m07s", or "2h05m" from an hour on.
std::string FormatDuration(double seconds);

}  // namespace strait
