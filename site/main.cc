// strait-site: one datacenter's daemon; trains the block of layers the job spec assigns to it
// (site/daemon/site_daemon.h).
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <string>

#include "core/command_line.h"
#include "core/logging.h"
#include "core/malloc_tuning.h"
#include "core/mutex_tuning.h"
#include "core/version.h"
#include "site/daemon/site_daemon.h"

int main(int argc, char** argv) {
  strait::KeepFreedMemoryForReuse();
  strait::SkipMutexDeadlockDetection();
  CLI::App app{
      "strait-site: trains one site's block of layers, exchanging activations and "
      "gradients with its neighbours through the gateway."};
  app.set_version_flag("--version", "strait-site " STRAIT_VERSION);
  strait::site::SiteOptions o;
  app.add_option("-c,--config", o.config, "Job spec (federation YAML)")
      ->required()
      ->type_name("FILE");
  app.add_option("-s,--site", o.site_id,
                 "This site's id (one of the job spec's sites, or of teacher.sites)")
      ->required()
      ->type_name("ID");
  app.add_option("--gateway", o.gateway, "Gateway address; overrides gateway.address")
      ->type_name("HOST:PORT");
  app.add_option("--cert", o.cert, "Site certificate (default: the job spec's tls.site_cert)")
      ->type_name("FILE");
  app.add_option("--key", o.key, "Site private key (default: tls.site_key)")->type_name("FILE");
  app.add_option("--ca", o.ca, "Federation CA certificate (default: tls.ca)")->type_name("FILE");
  app.add_option(
         "--steps", o.steps,
         "Train this many steps instead of the job spec's (every site of a run must give the "
         "same; the gateway refuses a site that does not)")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", o.threads, "Compute threads per worker")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--out", o.out, "Write final.ckpt and metrics.json to this directory")
      ->type_name("DIR");
  app.add_flag(
      "--resume", o.resume,
      "Resume from this site's newest intact checkpoint (training.checkpoint.dir/<site>/); "
      "the federation resumes from the newest step every site holds");
  app.add_option(
         "--reconnect-timeout", o.reconnect_timeout_s,
         "Seconds to keep trying to join again after losing the gateway (a gateway restart, a "
         "broken link) before exiting with the checkpoint intact")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_flag("!--no-eval", o.evaluate, "Skip the test-set evaluation after the last step");
  app.add_flag("--profile-again", o.profile_again,
               "With layers: auto, measure this site's per-layer profile again instead of using "
               "the cached one (training.checkpoint.dir/<site>/profile.json)");
  app.add_flag(
      "--serve", o.serve,
      "Serve text instead of training (the job's serving.clients ask with `strait "
      "generate --federation`): decode this site's layers with the weights of --checkpoint");
  app.add_option("--checkpoint", o.serve_checkpoint,
                 "With --serve: this site's checkpoint (its final.ckpt, or a step file)")
      ->type_name("FILE");
  app.add_option("--rank", o.rank,
                 "This process's rank in a site of several machines (sites[i].machines): 0 is the "
                 "leader, the only one that talks to the gateway")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--leader", o.leader,
                 "A site of several machines: where rank 0 listens for the other ranks (every "
                 "rank gives the same address; rank 0 binds it)")
      ->type_name("HOST:PORT");
  app.add_option("--collective-host", o.collective_host,
                 "Address of this machine that the site's Gloo all-reduce binds (default: "
                 "127.0.0.1 when --leader is on loopback, else the machine's hostname)")
      ->type_name("HOST");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  if (std::optional<int> code = strait::ParseCommandLine(app, argc, argv)) return *code;
  if (absl::Status s = strait::SetupLogging("site " + o.site_id, log_level); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);

  absl::Status status = strait::site::RunSite(o);
  if (!status.ok()) {
    std::fprintf(stderr, "strait-site %s: %s\n", o.site_id.c_str(), status.ToString().c_str());
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
