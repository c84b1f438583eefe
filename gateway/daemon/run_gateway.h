// strait-gateway as a composition (DESIGN.md §9): the job spec, the deny list, the handler logic
// (GatewayCore), the gRPC server (gateway/rpc/gateway_server.h), the dashboard, the ready file and
// the wait for a signal. main.cc parses the command line and calls RunGateway; a test may build its
// own gateway executable the same way, with a hook that adds to the gRPC server (server_hook.h).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "gateway/rpc/server_hook.h"

namespace strait::gateway {

struct GatewayDaemonOptions {
  std::string config;             // The job spec (federation YAML).
  std::string listen;             // Overrides gateway.listen when not empty.
  std::string dashboard_address;  // Overrides dashboard.address when not empty.
  std::string ready_file;         // Written once serving: "grpc=PORT\nhttp=PORT\n". Optional.
  std::string log_level = "info";
  bool no_dashboard = false;  // No dashboard, /metrics or /api/state.
  // Tests only; strait-gateway never sets it. Adds to the gRPC server as it is built (for example
  // an interceptor that alters a pushed frame).
  std::shared_ptr<ServerHook> server_hook;
};

// Declares strait-gateway's command-line options on `app`; parsing fills `options`, which must
// outlive the parse.
void AddGatewayFlags(CLI::App& app, GatewayDaemonOptions& options);

// Runs the gateway until SIGINT or SIGTERM, reloading tls.deny_list when the file changes. Returns
// the process's exit code: 0 after a signal, 2 for a bad configuration (job spec, certificates,
// deny list, dashboard token file, log level), 1 when it cannot listen or serve the dashboard; the
// reason goes to stderr. Installs signal handlers: call once per process, from main.
int RunGateway(const GatewayDaemonOptions& options);

}  // namespace strait::gateway
