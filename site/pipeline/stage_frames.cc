#include "site/pipeline/stage_frames.h"

#include <utility>

#include "core/status.h"
#include "site/pipeline/scoped_timer.h"

namespace strait::site {

StageFrames::StageFrames(const JobSpec& spec, int replica, int index, uint32_t generation,
                         StageLinks links, SiteMetrics& metrics)
    : spec_(spec),
      replica_(replica),
      index_(index),
      generation_(generation),
      links_(std::move(links)),
      metrics_(metrics) {}

std::vector<int64_t> ActivationShape(const ModelSpec& model, int64_t samples, int64_t features) {
  const int64_t dim = model.IsLanguageModel()             ? model.gpt.dim
                      : model.family == ModelFamily::kVit ? model.vit.dim
                                                          : 0;
  if (dim <= 0 || features % dim != 0) return {samples, features};
  return {samples * (features / dim), dim};
}

v1::TensorKey StageFrames::Key(int64_t step, int microbatch, int boundary, v1::Direction direction,
                               v1::Purpose purpose) const {
  v1::TensorKey key;
  key.set_job(spec_.name);
  key.set_step(static_cast<uint64_t>(step));
  key.set_microbatch(static_cast<uint32_t>(microbatch));
  key.set_boundary(static_cast<uint32_t>(boundary));
  key.set_direction(direction);
  key.set_purpose(purpose);
  key.set_generation(generation_);
  key.set_replica(static_cast<uint32_t>(replica_));
  return key;
}

OutgoingTensor::OutgoingTensor(const FrameSender& to, bool payloads, size_t floats) {
  const compression::StageSpec* stage = payloads ? to.device_value_stage() : nullptr;
  if (stage != nullptr) {
    out_ = BoundaryOut(*stage, to.next_chain_seed(), &payload_);
  } else {
    values_.resize(floats);
    out_ = BoundaryOut(values_.data());
  }
}

absl::StatusOr<DecodedBoundary> StageFrames::ReceiveBoundary(FrameReceiver& from,
                                                             const v1::TensorKey& key) {
  ScopedTimer timer(metrics_, Timer::kWait);
  return from.TakeBoundary(key);
}

absl::Status StageFrames::Send(FrameSender& to, const v1::TensorKey& key, OutgoingTensor& tensor,
                               std::vector<int64_t> shape) {
  ScopedTimer timer(metrics_, Timer::kWait);
  if (tensor.out_.encoded()) {
    return to.SendPayload(key, std::move(tensor.payload_), std::move(shape));
  }
  return to.Send(key, std::move(tensor.values_), std::move(shape));
}

absl::StatusOr<std::vector<float>> StageFrames::Receive(FrameReceiver& from,
                                                        const v1::TensorKey& key) {
  ScopedTimer timer(metrics_, Timer::kWait);
  return from.Take(key);
}

absl::Status StageFrames::Send(FrameSender& to, const v1::TensorKey& key, std::vector<float> values,
                               std::vector<int64_t> shape) {
  ScopedTimer timer(metrics_, Timer::kWait);  // Only blocks when too much is in flight.
  return to.Send(key, std::move(values), std::move(shape));
}

absl::StatusOr<std::string> StageFrames::ReceiveTargets(FrameReceiver& from,
                                                        const v1::TensorKey& key) {
  ScopedTimer timer(metrics_, Timer::kWait, Timer::kTeacherWait);
  return from.TakeBytes(key);
}

absl::Status StageFrames::SendTargets(FrameSender& to, const v1::TensorKey& key,
                                      std::string bytes) {
  ScopedTimer timer(metrics_, Timer::kWait);
  return to.SendBytes(key, std::move(bytes));
}

absl::Status StageFrames::Flush() {
  ScopedTimer timer(metrics_, Timer::kWait);
  if (links_.forward_out) STRAIT_RETURN_IF_ERROR(links_.forward_out->Flush());
  if (links_.backward_out) STRAIT_RETURN_IF_ERROR(links_.backward_out->Flush());
  if (links_.tied_out) STRAIT_RETURN_IF_ERROR(links_.tied_out->Flush());
  if (links_.sum_out) STRAIT_RETURN_IF_ERROR(links_.sum_out->Flush());
  if (links_.pace_out) STRAIT_RETURN_IF_ERROR(links_.pace_out->Flush());
  return absl::OkStatus();
}

void StageFrames::Abort(const absl::Status& status) {
  if (links_.forward_in) links_.forward_in->Stop(status);
  if (links_.backward_in) links_.backward_in->Stop(status);
  if (links_.forward_out) links_.forward_out->Stop(status);
  if (links_.backward_out) links_.backward_out->Stop(status);
  if (links_.tied_in) links_.tied_in->Stop(status);
  if (links_.tied_out) links_.tied_out->Stop(status);
  if (links_.sum_in) links_.sum_in->Stop(status);
  if (links_.sum_out) links_.sum_out->Stop(status);
  if (links_.teacher_in) links_.teacher_in->Stop(status);
  if (links_.pace_out) links_.pace_out->Stop(status);
  if (links_.pace_in) links_.pace_in->Stop(status);
}

}  // namespace strait::site
