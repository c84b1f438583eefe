// The lower bound on a training step's time that physics allows for a pipeline schedule, given the
// compute each stage was measured to need and the links between the sites and the gateway
// (docs/notes/wan-step-time-bound.md derives it). Two limits, and the step can beat neither:
//   * the critical path of the schedule's dependency graph: every forward and backward pass of
//     every microbatch on every stage, in the order the schedule runs them on that stage (the op
//     stream of StepOps over many steps: flushed per step for 1f1b and gpipe, overlapping
//     steps for 2bw), each waiting for its input from the neighbouring stage; a crossing from
//     stage i to stage j costs the one-way delay of both sites' links (site -> gateway -> site)
//     plus the frame's bytes over the slower link (sent once: a frame streamed through the
//     gateway); with clipping, the norm travels from the last stage to the first and the scale
//     back before each stage's update;
//   * the busiest link direction: the bytes a site sends (or receives) per step over its rate;
//     with a flush (1f1b, gpipe) plus the latency before its first frame of a step can exist and
//     after its last one, which no frame of the step can overlap.
// Codec, crypto and gRPC costs are deliberately absent: they are what achieved/bound exposes.
//
// Beside the bound, a model that is not one: the same op stream with each link direction carrying
// one frame at a time, in the order the frames reach it (a site's frames in the order its stage
// produced them; a consumer's link in the order they reached the gateway). It shows how much of
// what separates a run from the bound is frames queueing behind each other on a busy link, which
// the bound's two limits each leave out (the path sees every frame alone on its links, the busiest
// link ignores when its frames are produced). A different order of frames on a link could beat it,
// so it does not replace the bound.
#pragma once

#include <string>
#include <vector>

#include "core/job_spec.h"

namespace strait::plan {

struct StageCost {
  double forward_s = 0;   // One microbatch's forward pass (the loss included on the last stage).
  double backward_s = 0;  // One microbatch's backward pass.
  double update_s = 0;    // Per step: gradient norm and optimizer.
};

struct SiteLink {
  double one_way_delay_s = 0;
  double bytes_per_second = 0;  // 0: unlimited.
};

struct BoundInput {
  Schedule schedule = Schedule::k1F1B;
  int extra_in_flight = 0;                        // training.extra_in_flight
  UpdateTiming update = UpdateTiming::kDeferred;  // training.update (2bw)
  int microbatches = 1;
  std::vector<StageCost> stages;  // One per site, in pipeline order.
  std::vector<SiteLink> links;    // Site i's link to the gateway; same size as `stages`.
  // Wire bytes of one microbatch's frame across boundary b (between stages b and b+1).
  std::vector<double> forward_frame_bytes, backward_frame_bytes;
  bool clip = false;  // Global-norm clipping (grad_clip > 0).
};

struct StepBound {
  double step_s = 0;           // max(path_s, link_s): no schedule of these ops runs faster.
  double path_s = 0;           // Critical path per step, in the steady state.
  double path_delay_s = 0;     // The part of path_s spent in one-way link delays.
  double path_transfer_s = 0;  // The part of path_s spent serializing frames at link rate.
  int crossings = 0;           // Stage-to-stage crossings on the critical path per step.
  double bandwidth_s = 0;      // Busiest link direction: its bytes per step over its rate.
  double link_s = 0;           // Busiest link direction, with the latency it cannot overlap.
  // "compute", "latency", "transfer" (frames on the path), "bandwidth" (link_s, its bytes alone),
  // "link" (link_s, its bytes and the latency around them).
  std::string limited_by;
  double queued_s = 0;       // The period with links that queue frames (above): >= path_s.
  double queued_wait_s = 0;  // The part of queued_s's path spent waiting for a busy link.
};

// The bound for `input`. Requires stages.size() == links.size() >= 1, frame byte vectors of
// stages.size() - 1 entries, microbatches >= 1.
StepBound StepTimeLowerBound(const BoundInput& input);

}  // namespace strait::plan
