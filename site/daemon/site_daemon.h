// The strait-site daemon (DESIGN.md §1, §4, §5): joins the gateway over mutual TLS, exchanges keys
// with its neighbours, builds its stage, trains it as one stage of the federation's pipeline,
// reports progress to the gateway and stdout, evaluates, and writes its results.
//
// RunSite composes the rooms: the job spec and identity, a GatewayConnection
// (site/rpc/gateway_connection.h), a SiteSession that runs the generation loop
// (site/daemon/site_session.h) and the run's RunReport (core/run_report.h).
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
  bool insecure =
      false;          // Plaintext gRPC (tests); links may still be sealed with the certificates.
  int64_t steps = 0;  // > 0: overrides training.steps / epochs.
  int threads = 1;    // Compute threads per worker (CPU).
  std::string out;    // If set: final.ckpt and metrics.json are written there.
  double report_interval_s = 2.0;
  bool evaluate = true;  // Test accuracy through the pipeline after the last step.
  bool resume = false;   // Offer the newest valid checkpoint of this site to resume from.
  double reconnect_timeout_s = 300;  // After losing the gateway: how long to try joining again.
};

// Runs the site to the end of training. InvalidArgument for a bad config or option (exit code 2);
// any other error means training failed (exit code 1). Blocks; prints progress on stdout.
absl::Status RunSite(const SiteOptions& options);

}  // namespace strait::site
