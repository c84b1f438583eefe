// strait-site: one datacenter's daemon; trains the block of layers the job spec assigns to it.
//
// This version loads and validates the job spec and the site id; joining the gateway and training are
// built by the site issue and are not in this binary yet, so it exits after validation.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "core/job_spec.h"
#include "core/logging.h"
#include "core/version.h"

int main(int argc, char** argv) {
  CLI::App app{"strait-site: trains one site's block of layers, exchanging activations and "
               "gradients with its neighbours through the gateway."};
  app.set_version_flag("--version", "strait-site " STRAIT_VERSION);
  std::string config, site_id;
  app.add_option("-c,--config", config, "Job spec (federation YAML)")->required()->type_name("FILE");
  app.add_option("-s,--site", site_id, "This site's id (one of the job spec's sites)")
      ->required()
      ->type_name("ID");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (absl::Status s = strait::SetupLogging("site " + site_id, log_level); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }

  absl::StatusOr<strait::JobSpec> spec = strait::LoadJobSpec(config);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  int index = spec->SiteIndex(site_id);
  if (index < 0) {
    std::string ids;
    for (const auto& s : spec->sites) ids += (ids.empty() ? "" : ", ") + s.id;
    std::fprintf(stderr, "%s: no site '%s'; the sites are %s\n", config.c_str(), site_id.c_str(),
                 ids.c_str());
    return 2;
  }
  std::fprintf(stderr,
               "strait-site: %s is stage %d of %s (layers [%d, %d)); this build cannot train yet: "
               "joining and training arrive with the site issue.\n",
               site_id.c_str(), index, spec->name.c_str(), spec->sites[index].layers.start,
               spec->sites[index].layers.end);
  return 1;
}
