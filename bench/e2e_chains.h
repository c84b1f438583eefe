// `strait bench e2e --chains "F/B;F/B;..."`: the same job spec trained once per set of link chains
// (forward F and backward B on every link), one after the other in this run, on loopback or with
// every site behind an emulated link; for each set the held-out validation loss after the last
// step (against the first set's), the boundary bytes per sample each way and their ratio to fp32,
// and samples/s. The first set is the reference (e.g. none/none).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "harness/job_spec_rewrite.h"
#include "harness/wan/link_profile.h"

namespace strait::bench {

struct ChainsOptions {
  std::string config;
  harness::JobSpecOverrides overrides;  // Steps, batch, schedule...; the chains come from `chains`.
  std::string chains;
  std::optional<harness::LinkProfile> link;  // Every site behind it; none: loopback.
  std::vector<std::string> site_cpus;
};

// Prints the table; 0 on success, 2 for bad options, 1 when a run fails.
int RunChains(const ChainsOptions& o);

}  // namespace strait::bench
