// What of a job changes while it runs, kept apart from the job spec, which never does once loaded
// (issue 45): the pipeline (replica) this process's site belongs to, and the split of the model's
// layers over the stages in the current generation. A split written in the file stays as written;
// a planned one (`layers: auto`) is the gateway's choice and may change at a rollback (proto
// Rollback.split). A small value: a site's session holds its current one and replaces it at a
// rollback; the gateway's federation starts from one. Copies are cheap; not synchronised.
#pragma once

#include <string>
#include <vector>

#include "core/job_spec.h"

namespace strait {

struct JobView {
  // The pipeline whose sites this view names (JobSpec::replicas; 0 without replicas): its data
  // shard and the replica of its tensor keys.
  int replica = 0;
  // split[s]: the layers stage s runs in this generation, one range per stage of the spec.
  std::vector<LayerRange> split;
  // The split is the planner's (plan/split_planner.h WithSplit), not the file's.
  bool planned = false;

  // The view of `replica` with the split as the file writes it (a `layers: auto` site's range is
  // empty until planned). `replica` must be in [0, spec.Replicas()).
  static JobView Initial(const JobSpec& spec, int replica = 0);

  // The id of the site that runs stage `stage` of this view's replica.
  const std::string& SiteId(const JobSpec& spec, int stage) const {
    return spec.SiteIdAt(replica * spec.Stages() + stage);
  }
  // The layers of stage `stage` in this generation.
  const LayerRange& Layers(int stage) const { return split[stage]; }
};

}  // namespace strait
