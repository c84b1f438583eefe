// strait-gateway: the parameter-server exchange between sites (DESIGN.md §1).
//
// This version loads and validates the job spec; the gRPC service, mailbox and dashboard are built
// by the gateway issue and are not in this binary yet, so it exits after validation.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "core/job_spec.h"
#include "core/logging.h"
#include "core/version.h"

int main(int argc, char** argv) {
  CLI::App app{"strait-gateway: routes sealed activations and gradients between the sites of a "
               "federation and serves its dashboard."};
  app.set_version_flag("--version", "strait-gateway " STRAIT_VERSION);
  std::string config;
  app.add_option("-c,--config", config, "Job spec (federation YAML)")->required()->type_name("FILE");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (absl::Status s = strait::SetupLogging("gateway", log_level); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }

  absl::StatusOr<strait::JobSpec> spec = strait::LoadJobSpec(config);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  std::fprintf(stderr,
               "strait-gateway: job spec %s is valid (federation %s, %zu sites), but this build has no "
               "gateway service yet; it arrives with the gateway issue.\n",
               config.c_str(), spec->name.c_str(), spec->sites.size());
  return 1;
}
