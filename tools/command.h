// How the subcommands of the `strait` tool plug into its command line.
#pragma once

#include <CLI/CLI.hpp>

namespace strait::tools {

// Each subcommand adds itself to `app` and, when it runs, stores the process exit code in
// *exit_code (0 success, 1 failure, 2 bad input such as an invalid job spec).
void AddConfigCommand(CLI::App& app, int* exit_code);
void AddCertsCommand(CLI::App& app, int* exit_code);
void AddTrainCommand(CLI::App& app, int* exit_code);
void AddGenerateCommand(CLI::App& app, int* exit_code);
void AddExportCommand(CLI::App& app, int* exit_code);
void AddDemoCommand(CLI::App& app, int* exit_code);
void AddWanCommand(CLI::App& app, int* exit_code);
void AddTokenizerCommand(CLI::App& app, int* exit_code);
void AddDataCommand(CLI::App& app, int* exit_code);   // strait data prepare
void AddPlanCommands(CLI::App& app, int* exit_code);  // strait profile, strait plan

}  // namespace strait::tools
