// Global-norm clipping across the stages of a pipeline (DESIGN.md §4), carried on the links: after
// a step's last backward pass, stage i receives the sum of squares of stages i+1..S-1, adds its own
// (StageExecutor::GradSumSquares chains last to first) and sends the total back; stage 0 turns it
// into the clip scale, which travels forward stage by stage, each stage taking and relaying it
// right before its update. Both are CLIP-purpose frames, sealed like the tensors and never lossy.
//
// With LaggedClip (core/schedule.h: 2bw whose update runs before the next step's forwards), a step
// is clipped with the previous step's norm: the first stage keeps that scale and, before the
// forward of the step's last microbatch, passes it downstream in front of the microbatch.
//
// Called by SiteRunner at the schedule's kClipNorm and kUpdate ops, on the training thread.
#pragma once

#include <cstdint>
#include <map>

#include "absl/status/statusor.h"
#include "site/pipeline/stage_executor.h"
#include "site/pipeline/stage_frames.h"

namespace strait::site {

class ClipNormRelay {
 public:
  // `frames` and `stage` must outlive the relay. Does nothing without training.grad_clip.
  ClipNormRelay(StageFrames& frames, StageExecutor& stage);

  // Announce the relay's frames of `step` to the receivers, in the order the ops take them:
  // the scale (with the update that takes it), the downstream norm (at kClipNorm).
  void ExpectScale(int64_t step);
  void ExpectNorm(int64_t step);

  // kClipNorm: this stage's part of the clipping norm of `step`'s gradient goes upstream; on the
  // first stage it becomes the scale.
  absl::Status SendNorm(int64_t step);
  // Before the forward of step's last microbatch, with LaggedClip: the first stage takes the scale
  // of the last step's norm, the others receive it from upstream; each passes it downstream (in
  // front of the microbatch) and keeps it for the step's update.
  absl::Status PassLaggedScale(int64_t step);
  // kUpdate: the clipping scale of `step`'s gradient, taken (and relayed downstream) or kept; 1
  // without clipping. INTERNAL when the first stage's norm of `step` was never computed.
  absl::StatusOr<float> TakeScale(int64_t step);

 private:
  bool clips() const;

  StageFrames& frames_;
  StageExecutor& stage_;
  // Clipping scales not yet applied, by step: the first stage's, or with LaggedClip every stage's.
  std::map<int64_t, float> scales_;
};

}  // namespace strait::site
