// `strait`: the operator's tool (demo, config check, certs, train, generate, tokenizer, data, wan,
// profile, plan, bench).
#include <CLI/CLI.hpp>

#include "bench/command.h"
#include "core/command_line.h"
#include "core/malloc_tuning.h"
#include "core/mutex_tuning.h"
#include "core/version.h"
#include "tools/command.h"

int main(int argc, char** argv) {
  strait::KeepFreedMemoryForReuse();
  strait::SkipMutexDeadlockDetection();
  CLI::App app{
      "strait: train one neural network across several datacenters.\n"
      "Operator tool: check job specs, run the demo federation, train a reference, train a "
      "tokenizer, emulate a WAN link, benchmark."};
  app.set_version_flag("--version", "strait " STRAIT_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  strait::tools::AddDemoCommand(app, &exit_code);
  strait::tools::AddConfigCommand(app, &exit_code);
  strait::tools::AddCertsCommand(app, &exit_code);
  strait::tools::AddTrainCommand(app, &exit_code);
  strait::tools::AddGenerateCommand(app, &exit_code);
  strait::tools::AddExportCommand(app, &exit_code);
  strait::tools::AddTokenizerCommand(app, &exit_code);
  strait::tools::AddDataCommand(app, &exit_code);
  strait::tools::AddWanCommand(app, &exit_code);
  strait::tools::AddPlanCommands(app, &exit_code);

  // Benchmarks print figures measured side by side in one run; each registers under `strait bench`.
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (results go in docs/benchmarks.md)");
  bench->require_subcommand(1);
  strait::bench::AddBenchCryptoCommand(*bench, &exit_code);
  strait::bench::AddBenchRelayCommand(*bench, &exit_code);
  strait::bench::AddBenchStreamCommand(*bench, &exit_code);
  strait::bench::AddBenchEngineCommand(*bench, &exit_code);
  strait::bench::AddBenchCodecsCommand(*bench, &exit_code);
  strait::bench::AddBenchCollectiveCommand(*bench, &exit_code);
  strait::bench::AddBenchE2eCommand(*bench, &exit_code);
  strait::bench::AddBenchPlanCommand(*bench, &exit_code);
  strait::bench::AddBenchReplanCommand(*bench, &exit_code);
  strait::bench::AddBenchReplicasCommand(*bench, &exit_code);
  strait::bench::AddBenchChaosCommand(*bench, &exit_code);
  strait::bench::AddBenchDistillCommand(*bench, &exit_code);
  strait::bench::AddBenchGenerateCommand(*bench, &exit_code);
  strait::bench::AddBenchShardsCommand(*bench, &exit_code);

  if (std::optional<int> code = strait::ParseCommandLine(app, argc, argv)) return *code;
  return exit_code;
}
