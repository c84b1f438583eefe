// One federated training run on loopback for the end-to-end benchmarks (`strait bench e2e`,
// `strait bench plan`): gateway and sites as real processes (tools/local_federation.h), sites
// optionally under CPU quotas and behind emulated WAN links, and the figures their metrics.json
// files report.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "harness/local_federation.h"
#include "harness/wan/link_profile.h"

namespace strait::bench {

inline constexpr auto kRunLimit = std::chrono::seconds(3600);

struct SiteFigures {
  std::string id;
  double train_seconds = 0;
  double train_cpu_seconds = 0;
  nlohmann::json time;  // compute_s, wait_s, encode_s, decode_s, seal_s, open_s, forward_s, ...
  double WaitFraction() const { return time.value("wait_s", 0.0) / std::max(train_seconds, 1e-9); }
};

struct FederationRun {
  double samples_per_second = 0;  // The last stage's, over its whole run.
  // The last stage's from the end of its first step to the end of its last: the steady state,
  // without the pipeline's fill and drain (what the bound is a bound on).
  double steady_samples_per_second = 0;
  double raw_bytes = 0, wire_bytes = 0;  // Sent across every boundary, both directions, all steps.
  double forward_wire_bytes = 0, backward_wire_bytes = 0;  // The same, each direction.
  double val_loss = 0;  // The last stage's held-out loss after the run (with `evaluate` only).
  std::vector<SiteFigures> sites;
  // CPU seconds of the gateway and of the emulators' threads during the run.
  double gateway_cpu_seconds = 0, emulator_cpu_seconds = 0;
  // With the sites' training loops: all the CPU the federation spent.
  double CpuSeconds() const {
    double sum = gateway_cpu_seconds + emulator_cpu_seconds;
    for (const SiteFigures& s : sites) sum += s.train_cpu_seconds;
    return sum;
  }
  // Wire bytes of one frame across each boundary (mean over the run), for the bound.
  std::vector<double> forward_frame_bytes, backward_frame_bytes;
};

// A site's metrics.json (or reference's) in `dir`; discarded JSON when absent or malformed.
nlohmann::json Metrics(const std::string& dir);

std::vector<std::string> SiteIds(const JobSpec& spec);

// Trains `spec` in `fed` (gateway, then every site with one compute thread, evaluated after the
// last step only with `evaluate`): the sites named in `links` behind an emulated link of that
// profile, the others on plain loopback; `site_cpus` ("SITE=CORES") caps sites' CPU. Blocks until
// every site has exited.
absl::StatusOr<FederationRun> RunFederation(
    harness::LocalFederation& fed, const JobSpec& spec,
    const std::map<std::string, harness::LinkProfile>& links,
    const std::vector<std::string>& site_cpus, bool evaluate = false);

}  // namespace strait::bench
