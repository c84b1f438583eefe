// How the subcommands of the `strait` tool plug into its command line.
#pragma once

#include <CLI/CLI.hpp>

namespace strait::tools {

// Each subcommand adds itself to `app` and, when it runs, stores the process exit code in
// *exit_code (0 success, 1 failure, 2 bad input such as an invalid job spec).
void AddConfigCommand(CLI::App& app, int* exit_code);
// `strait bench codecs` (bench/codec_bench.cc); `bench` is the `strait bench` group.
void AddBenchCodecsCommand(CLI::App& bench, int* exit_code);

}  // namespace strait::tools
