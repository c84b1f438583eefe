#include "site/pipeline/clip_norm_relay.h"

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/schedule.h"
#include "core/status.h"
#include "site/nn/optimizer.h"
#include "site/pipeline/scoped_timer.h"

namespace strait::site {
namespace {

// A double crosses a link as the two floats that hold its bits (the lossless chain keeps bits).
std::vector<float> DoubleAsFloats(double value) {
  std::vector<float> out(2);
  std::memcpy(out.data(), &value, sizeof(double));
  return out;
}
double FloatsAsDouble(const std::vector<float>& values) {
  double value;
  std::memcpy(&value, values.data(), sizeof(double));
  return value;
}

}  // namespace

ClipNormRelay::ClipNormRelay(StageFrames& frames, StageExecutor& stage)
    : frames_(frames), stage_(stage) {}

bool ClipNormRelay::clips() const { return frames_.spec().training.grad_clip > 0.0; }

void ClipNormRelay::ExpectScale(int64_t step) {
  const StageLinks& links = frames_.links();
  if (!clips() || !links.forward_in) return;
  links.forward_in->Expect(frames_.Key(step, 0, frames_.index() - 1, v1::FORWARD, v1::CLIP), {1});
}

void ClipNormRelay::ExpectNorm(int64_t step) {
  const StageLinks& links = frames_.links();
  if (!clips() || !links.backward_in) return;
  links.backward_in->Expect(frames_.Key(step, 0, frames_.index(), v1::BACKWARD, v1::CLIP), {2});
}

absl::Status ClipNormRelay::SendNorm(int64_t s) {
  if (!clips()) return absl::OkStatus();
  const StageLinks& links = frames_.links();
  const int index = frames_.index();
  double downstream = 0.0;
  if (links.backward_in) {
    STRAIT_ASSIGN_OR_RETURN(
        std::vector<float> sum,
        frames_.Receive(*links.backward_in, frames_.Key(s, 0, index, v1::BACKWARD, v1::CLIP)));
    downstream = FloatsAsDouble(sum);
  }
  double total;
  {
    ScopedTimer timer(frames_.metrics(), Timer::kCompute, Timer::kUpdate);
    STRAIT_ASSIGN_OR_RETURN(total, stage_.GradSumSquares(downstream, s));
  }
  if (links.backward_out) {
    return frames_.Send(*links.backward_out, frames_.Key(s, 0, index - 1, v1::BACKWARD, v1::CLIP),
                        DoubleAsFloats(total), {2});
  }
  const TrainingSpec& t = frames_.spec().training;
  const float scale = GlobalNormClipScale(total, t.grad_clip);
  if (LaggedClip(t)) {
    stage_.set_lagged_clip_scale(scale);  // For the next step (PassLaggedScale).
  } else {
    scales_[s] = scale;
  }
  return absl::OkStatus();
}

absl::Status ClipNormRelay::PassLaggedScale(int64_t s) {
  const StageLinks& links = frames_.links();
  const int index = frames_.index();
  float scale;
  if (links.forward_in) {
    STRAIT_ASSIGN_OR_RETURN(
        std::vector<float> relayed,
        frames_.Receive(*links.forward_in, frames_.Key(s, 0, index - 1, v1::FORWARD, v1::CLIP)));
    scale = relayed[0];
  } else {
    scale = stage_.lagged_clip_scale();  // Of step s - 1's norm: its SendNorm came before.
  }
  scales_[s] = scale;
  if (!links.forward_out) return absl::OkStatus();
  return frames_.Send(*links.forward_out, frames_.Key(s, 0, index, v1::FORWARD, v1::CLIP), {scale},
                      {1});
}

absl::StatusOr<float> ClipNormRelay::TakeScale(int64_t s) {
  if (!clips()) return 1.0f;
  const StageLinks& links = frames_.links();
  const int index = frames_.index();
  const bool lagged = LaggedClip(frames_.spec().training);
  float scale;
  if (links.forward_in && !lagged) {
    STRAIT_ASSIGN_OR_RETURN(
        std::vector<float> relayed,
        frames_.Receive(*links.forward_in, frames_.Key(s, 0, index - 1, v1::FORWARD, v1::CLIP)));
    scale = relayed[0];
  } else {
    auto it = scales_.find(s);
    if (it == scales_.end()) {
      return absl::InternalError(absl::StrCat("update of step ", s, " before its clipping norm"));
    }
    scale = it->second;
    scales_.erase(it);
  }
  if (links.forward_out && !lagged) {
    STRAIT_RETURN_IF_ERROR(frames_.Send(
        *links.forward_out, frames_.Key(s, 0, index, v1::FORWARD, v1::CLIP), {scale}, {1}));
  }
  return scale;
}

}  // namespace strait::site
