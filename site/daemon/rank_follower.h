// A follower rank (1 .. machines - 1) of a site of several machines (DESIGN.md §4): attaches to
// its leader, joins the site's collective group, builds the stage the leader says and serves the
// calls the leader's StageExecutor mirrors (site/pipeline/rank_call.h), until the leader says
// training is over. It holds no data, no keys and no checkpoint: the leader sends it inputs and
// restored state. When its group ends without a finish (another rank failed, or the leader), it
// drops its stage and attaches again, for as long as `reconnect_timeout_s` allows.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "core/env.h"
#include "core/job_spec.h"
#include "core/job_view.h"
#include "site/rpc/rank_client.h"

namespace strait::site {

struct FollowerOptions {
  const JobSpec* spec = nullptr;  // Must outlive the call.
  const JobView* view = nullptr;  // The site's replica and split as it started; must outlive it.
  int index = 0;                  // The site's stage.
  int rank = 1;
  int threads = 1;  // Compute threads per worker.
  LeaderAddress leader;
  std::string collective_host = "127.0.0.1";  // Where this rank's Gloo connections bind.
  double reconnect_timeout_s = 300;           // How long to keep attaching after the group ended.
  Env* env = Env::Default();  // The clock of reconnect_timeout_s and of the pause between attaches.
};

// Serves until the leader finishes the run (OK) or stops it (Aborted with the leader's reason),
// refuses this rank (its error: InvalidArgument or PermissionDenied), or cannot be reached for
// reconnect_timeout_s (Unavailable). Blocks.
absl::Status RunFollower(const FollowerOptions& options);

}  // namespace strait::site
