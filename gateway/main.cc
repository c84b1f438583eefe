// strait-gateway: routes sealed activations and gradients between the sites of a federation
// (DESIGN.md §1): the gRPC Gateway service over mutual TLS, the mailbox, membership and metrics.
// The daemon itself is gateway/daemon/run_gateway.h; this file is its command line.
#include <CLI/CLI.hpp>
#include <optional>

#include "core/command_line.h"
#include "core/malloc_tuning.h"
#include "core/mutex_tuning.h"
#include "core/version.h"
#include "gateway/daemon/run_gateway.h"

int main(int argc, char** argv) {
  strait::KeepFreedMemoryForReuse();
  strait::SkipMutexDeadlockDetection();
  CLI::App app{
      "strait-gateway: routes sealed activations and gradients between the sites of a "
      "federation and serves its dashboard."};
  app.set_version_flag("--version", "strait-gateway " STRAIT_VERSION);
  strait::gateway::GatewayDaemonOptions options;
  strait::gateway::AddGatewayFlags(app, options);
  if (std::optional<int> code = strait::ParseCommandLine(app, argc, argv)) return *code;
  return strait::gateway::RunGateway(options);
}
