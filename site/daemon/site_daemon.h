// The strait-site daemon (DESIGN.md §1, §4, §5): joins the gateway over mutual TLS, exchanges keys
// with its neighbours, builds its stage, trains it as one stage of the federation's pipeline,
// reports progress to the gateway and stdout, evaluates, and writes its results.
//
// RunSite composes the rooms: the job spec and identity, a GatewayConnection
// (site/rpc/gateway_connection.h), a SiteSession that runs the generation loop
// (site/daemon/site_session.h) and the run's RunReport (core/run_report.h). On a site of several
// machines, rank 0 does all that as the leader of the site's group (site/daemon/rank_leader.h),
// forming it again and rejoining from its checkpoint whenever a rank fails; the other ranks serve
// it (site/daemon/rank_follower.h).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace strait::site {

struct SiteOptions {
  std::string config;  // Job spec path.
  std::string site_id;
  std::string gateway;        // host:port; empty: the job spec's gateway.address.
  std::string cert, key, ca;  // PEM paths; empty: the job spec's tls: section.
  int64_t steps = 0;          // > 0: overrides training.steps / epochs.
  int threads = 1;            // Compute threads per worker (CPU).
  std::string out;            // If set: final.ckpt and metrics.json are written there.
  double report_interval_s = 2.0;
  bool evaluate = true;  // Test accuracy through the pipeline after the last step.
  bool resume = false;   // Offer the newest valid checkpoint of this site to resume from.
  double reconnect_timeout_s = 300;  // After losing the gateway: how long to try joining again.
  // A site of several machines (sites[i].machines > 1; DESIGN.md §4): this process's rank (0: the
  // leader, which alone talks to the gateway), the leader's address for the site's ranks (rank 0
  // listens there, the others dial it), and where this rank's collective (Gloo) connections bind.
  int rank = 0;
  std::string leader;
  std::string collective_host;  // Empty: 127.0.0.1 when the leader is on loopback, else the
                                // machine's hostname.
  // layers: auto: measure this site's profile again rather than take the cached one
  // (<checkpoint dir>/<site>/profile.json).
  bool profile_again = false;
  // A serving federation (docs/distillation.md): decode clients' requests with the weights of
  // `serve_checkpoint` (this site's checkpoint: its final.ckpt or one of its step files) instead of
  // training.
  bool serve = false;
  std::string serve_checkpoint;
};

// Runs the site to the end of training. InvalidArgument for a bad config or option (exit code 2);
// any other error means training failed (exit code 1). Blocks; prints progress on stdout.
absl::Status RunSite(const SiteOptions& options);

}  // namespace strait::site
