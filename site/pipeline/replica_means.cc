#include "site/pipeline/replica_means.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/pipeline/scoped_timer.h"

namespace strait::site {

ReplicaMeans::ReplicaMeans(StageFrames& frames, StageExecutor& stage)
    : frames_(frames), stage_(stage) {}

absl::Status ReplicaMeans::AverageGrads(int64_t s) {
  const JobSpec& spec = frames_.spec();
  if (spec.Replicas() < 2 || spec.training.sync != ReplicaSync::kEveryStep) {
    return absl::OkStatus();
  }
  std::vector<float> grads;
  {
    ScopedTimer timer(frames_.metrics(), Timer::kCompute, Timer::kUpdate);
    STRAIT_ASSIGN_OR_RETURN(grads, stage_.Grads(s));
  }
  STRAIT_ASSIGN_OR_RETURN(
      std::vector<float> mean,
      Mean("grad", s, grads, FixedPointSumFormat(spec.training.fixed_point_bits, spec.Replicas())));
  ScopedTimer timer(frames_.metrics(), Timer::kCompute, Timer::kUpdate);
  return stage_.SetGrads(s, mean);
}

absl::StatusOr<std::vector<float>> ReplicaMeans::Mean(const std::string& what, int64_t round,
                                                      std::span<const float> values,
                                                      const SumFormat& format,
                                                      std::vector<float>* own) {
  STRAIT_ASSIGN_OR_RETURN(PendingSum pending, Start(what, round, values, format, own));
  return Finish(pending);
}

absl::StatusOr<PendingSum> ReplicaMeans::Start(const std::string& what, int64_t round,
                                               std::span<const float> values,
                                               const SumFormat& format, std::vector<float>* own) {
  const StageLinks& links = frames_.links();
  if (!links.sum_out || !links.sum_in || !links.mask) {
    return absl::FailedPreconditionError("this stage has no link to its replicas' sums");
  }
  const int index = frames_.index();
  const size_t n = values.size();
  std::vector<uint32_t> words(MaskedCount(n, format.bits), 0);
  {
    // Quantising and masking are this path's sealing.
    ScopedTimer timer(frames_.metrics(), Timer::kSeal);
    const int64_t clamped = QuantizeForSum(values, format, std::span(words).first(n));
    if (clamped > 0 && clamped_ == 0) {
      spdlog::warn(
          "{} of {} values of the {} sum of step {} lie outside the fixed point's range "
          "({} bits) and were clamped",
          clamped, n, what, round, format.bits);
    }
    clamped_ += clamped;
    if (own != nullptr) {
      own->resize(n);
      DequantizeOwn(std::span(words).first(n), format, *own);
    }
    STRAIT_RETURN_IF_ERROR(links.mask(absl::StrCat(what, "/stage ", index, "/round ", round,
                                                   "/generation ", frames_.generation()),
                                      words));
    words = PackLanes(words, format.bits);
  }
  const int lanes = format.lanes();
  std::vector<float> packed(words.size());
  std::memcpy(packed.data(), words.data(), words.size() * sizeof(uint32_t));
  const std::vector<int64_t> shape = {static_cast<int64_t>(words.size())};
  PendingSum pending{.format = format,
                     .count = n,
                     .back = frames_.Key(round, lanes, index, v1::BACKWARD, v1::SUM),
                     .sent = std::chrono::steady_clock::now()};
  links.sum_in->Expect(pending.back, shape);
  STRAIT_RETURN_IF_ERROR(frames_.Send(*links.sum_out,
                                      frames_.Key(round, lanes, index, v1::FORWARD, v1::SUM),
                                      std::move(packed), shape));
  return pending;
}

absl::StatusOr<std::vector<float>> ReplicaMeans::Finish(const PendingSum& pending) {
  STRAIT_ASSIGN_OR_RETURN(std::vector<float> sum,
                          frames_.Receive(*frames_.links().sum_in, pending.back));
  std::vector<uint32_t> words(sum.size());
  std::memcpy(words.data(), sum.data(), words.size() * sizeof(uint32_t));
  std::vector<float> mean(pending.count);
  MeanOfSum(UnpackLanes(words, pending.format.bits, pending.count), pending.format, mean);
  return mean;
}

}  // namespace strait::site
