// The links of one generation's stage (DESIGN.md §4, §5): the senders and receivers of its four
// link directions, the tied link of the first and the last stage (core/tied_embeddings.h), the
// secure sums of its replicas and the teacher's links (core/teach_links.h), with codecs from the
// job spec and keys derived from the peers' current signed keys and the generation. The session
// builds them once per generation, on the training thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/exchange/gateway_link.h"
#include "site/exchange/link_security.h"
#include "site/pipeline/site_metrics.h"
#include "site/pipeline/site_runner.h"
#include "site/pipeline/stage_server.h"
#include "strait/v1/gateway.pb.h"

namespace strait::site {

// What seals a generation's links: this site's signed key (null before it joined: then only
// links without encryption can be built) and the peers' signed keys by site id, for `generation`.
// The peers are the sites of pipeline `replica` (JobView::replica).
struct LinkSealing {
  const LinkSecurity* security = nullptr;
  const std::map<std::string, v1::SignedKey>* peers = nullptr;  // Not owned.
  uint32_t generation = 0;
  int replica = 0;
};

// How much a stage's links hold: frames in flight per direction, and the largest tensor a frame
// may carry on the pipeline's links and on the replicas' sums (bytes).
struct LinkLimits {
  int window = 1;
  uint64_t max_raw = 0;
  uint64_t max_sum_raw = 0;
};

// Prefetch and send-ahead as deep as any stage of `spec` keeps microbatches in flight (+1 for the
// clipping frame).
int LinkWindow(const JobSpec& spec);

// The limits of `stage`'s links (stage `index` of `spec`) with `window` frames in flight.
LinkLimits LinkLimitsOf(const JobSpec& spec, const StageExecutor& stage, int window);

// The links of stage `index` of `spec` through `gateway`, counted in `metrics` (both must outlive
// the links). An error names the peer whose key does not verify, or a missing key.
absl::StatusOr<StageLinks> BuildStageLinks(const JobSpec& spec, int index, GatewayLink& gateway,
                                           const LinkSealing& sealing, SiteMetrics& metrics,
                                           const LinkLimits& limits);

// Serving (docs/distillation.md): the links of stage `index` for `request` (site/pipeline/
// stage_server.h), sealed with keys derived for it alone (purpose "serve/<request>") from the
// neighbours', the first and the last stage's, and the client's signed keys.
absl::StatusOr<ServeLinks> BuildServeLinks(const JobSpec& spec, int index, GatewayLink& gateway,
                                           const LinkSealing& sealing,
                                           const v1::ServeRequest& request, SiteMetrics& metrics);

// Knowledge sharing: the links of teacher stage `teacher_stage` (core/teach_links.h): forward_in
// from the teacher stage before (none on the first), forward_out to the next teacher stage or, from
// the last, to the student's last stage. Sealed always (FAILED_PRECONDITION without a signed key).
absl::StatusOr<StageLinks> BuildTeacherLinks(const JobSpec& spec, int teacher_stage,
                                             GatewayLink& gateway, const LinkSealing& sealing,
                                             SiteMetrics& metrics, const LinkLimits& limits);

}  // namespace strait::site
