// How the `strait bench` subcommands plug into the tool's command line (tools/main.cc).
#pragma once

#include <CLI/CLI.hpp>

namespace strait::bench {

// Each adds itself to `bench` (the `strait bench` subcommand) and, when it runs, stores the process
// exit code in *exit_code (0 success, 1 failure, 2 bad input).
void AddBenchCryptoCommand(CLI::App& bench, int* exit_code);
void AddBenchRelayCommand(CLI::App& bench, int* exit_code);
void AddBenchStreamCommand(CLI::App& bench, int* exit_code);
void AddBenchEngineCommand(CLI::App& bench, int* exit_code);
void AddBenchCodecsCommand(CLI::App& bench, int* exit_code);
void AddBenchCollectiveCommand(CLI::App& bench, int* exit_code);
void AddBenchE2eCommand(CLI::App& bench, int* exit_code);
void AddBenchPlanCommand(CLI::App& bench, int* exit_code);
void AddBenchReplanCommand(CLI::App& bench, int* exit_code);
void AddBenchReplicasCommand(CLI::App& bench, int* exit_code);
void AddBenchChaosCommand(CLI::App& bench, int* exit_code);
void AddBenchDistillCommand(CLI::App& bench, int* exit_code);
void AddBenchGenerateCommand(CLI::App& bench, int* exit_code);
void AddBenchShardsCommand(CLI::App& bench, int* exit_code);

}  // namespace strait::bench
