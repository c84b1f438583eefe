// Tied embeddings (core/tied_embeddings.h) whose two copies sit on different sites: at kClipNorm
// the first and the last stage each send the other their gradient of the shared matrix (TIED
// frames, on their own link, or on the neighbours' link with two stages); the first stage adds the
// last's right away (its part of the clipping norm counts the sum), the last stage adds the
// first's at kUpdate, before the clipping scale. When one site holds both copies (or none), the
// exchange is the stage's own sum of its copies.
//
// Called by SiteRunner at the schedule's kClipNorm and kUpdate ops, on the training thread.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "site/pipeline/stage_executor.h"
#include "site/pipeline/stage_frames.h"

namespace strait::site {

class TiedGradientExchange {
 public:
  // `frames` and `stage` must outlive the exchange.
  TiedGradientExchange(StageFrames& frames, StageExecutor& stage);

  // Announce the exchange's frames of `step`, in the order the ops take them: the last stage's
  // receipt at the update, the first stage's at kClipNorm.
  void ExpectAtUpdate(int64_t step);
  void ExpectAtNorm(int64_t step);

  // kClipNorm, before the norm: sends this stage's tied gradient of `step` (first stage: and adds
  // the last's).
  absl::Status Share(int64_t step);
  // kUpdate, before the clipping scale: the last stage adds the first stage's tied gradient.
  absl::Status AddAtUpdate(int64_t step);

 private:
  // The link of the TIED frames: the stages' own, or the neighbours' with two stages.
  FrameSender& Out() const;
  FrameReceiver& In() const;
  v1::TensorKey Key(int64_t step, bool from_first) const;
  std::vector<int64_t> Shape() const;  // [vocab, dim]

  StageFrames& frames_;
  StageExecutor& stage_;
  const bool across_;  // The first and the last stage exchange tied gradients.
};

}  // namespace strait::site
