#include "site/pipeline/tied_gradient_exchange.h"

#include <utility>

#include "core/status.h"
#include "core/tied_embeddings.h"
#include "site/pipeline/scoped_timer.h"

namespace strait::site {

TiedGradientExchange::TiedGradientExchange(StageFrames& frames, StageExecutor& stage)
    : frames_(frames), stage_(stage), across_(TiedAcrossSites(frames.spec())) {}

v1::TensorKey TiedGradientExchange::Key(int64_t step, bool from_first) const {
  return frames_.Key(step, 0, 0, from_first ? v1::FORWARD : v1::BACKWARD, v1::TIED);
}

std::vector<int64_t> TiedGradientExchange::Shape() const {
  return {frames_.spec().model.gpt.vocab, frames_.spec().model.gpt.dim};
}

FrameSender& TiedGradientExchange::Out() const {
  const StageLinks& links = frames_.links();
  if (links.tied_out) return *links.tied_out;
  return stage_.is_first() ? *links.forward_out : *links.backward_out;
}

FrameReceiver& TiedGradientExchange::In() const {
  const StageLinks& links = frames_.links();
  if (links.tied_in) return *links.tied_in;
  return stage_.is_first() ? *links.backward_in : *links.forward_in;
}

void TiedGradientExchange::ExpectAtUpdate(int64_t step) {
  if (across_ && stage_.is_last()) In().Expect(Key(step, /*from_first=*/true), Shape());
}

void TiedGradientExchange::ExpectAtNorm(int64_t step) {
  if (across_ && stage_.is_first()) In().Expect(Key(step, /*from_first=*/false), Shape());
}

absl::Status TiedGradientExchange::Share(int64_t s) {
  SiteMetrics& metrics = frames_.metrics();
  if (!across_) {
    ScopedTimer timer(metrics, Timer::kCompute, Timer::kUpdate);
    return stage_.TieLocalGrads(s);  // One site holds both copies (or none: a no-op).
  }
  if (!stage_.is_first() && !stage_.is_last()) return absl::OkStatus();
  std::vector<float> own;
  {
    ScopedTimer timer(metrics, Timer::kCompute, Timer::kUpdate);
    STRAIT_ASSIGN_OR_RETURN(own, stage_.TiedGrad(s));
  }
  STRAIT_RETURN_IF_ERROR(frames_.Send(Out(), Key(s, stage_.is_first()), std::move(own), Shape()));
  if (!stage_.is_first()) return absl::OkStatus();  // The last stage adds the first's at kUpdate.
  STRAIT_ASSIGN_OR_RETURN(std::vector<float> other,
                          frames_.Receive(In(), Key(s, /*from_first=*/false)));
  ScopedTimer timer(metrics, Timer::kCompute, Timer::kUpdate);
  return stage_.AddTiedGrad(s, other);
}

absl::Status TiedGradientExchange::AddAtUpdate(int64_t s) {
  if (!across_ || !stage_.is_last()) return absl::OkStatus();
  STRAIT_ASSIGN_OR_RETURN(std::vector<float> first,
                          frames_.Receive(In(), Key(s, /*from_first=*/true)));
  ScopedTimer timer(frames_.metrics(), Timer::kCompute, Timer::kUpdate);
  return stage_.AddTiedGrad(s, first);
}

}  // namespace strait::site
