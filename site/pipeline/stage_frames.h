// The frames of one stage's links, as SiteRunner and its step-end collaborators (ClipNormRelay,
// TiedGradientExchange, ReplicaMeans, OuterRounds) see them: the keys (job, step, microbatch,
// boundary, direction, purpose, rollback generation, replica) and sends and receives whose
// blocking counts as waiting (Timer::kWait). Owns the links. For the training thread, except
// Abort.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "site/pipeline/frame_receiver.h"
#include "site/pipeline/frame_sender.h"
#include "site/pipeline/site_metrics.h"

namespace strait::site {

// The four link directions of a stage; the ones that do not exist (first / last stage) are null.
struct StageLinks {
  std::unique_ptr<FrameReceiver> forward_in;   // Activations from stage i-1.
  std::unique_ptr<FrameSender> backward_out;   // Their gradients, to stage i-1.
  std::unique_ptr<FrameSender> forward_out;    // Activations to stage i+1.
  std::unique_ptr<FrameReceiver> backward_in;  // Their gradients, from stage i+1.
  // Tied embeddings across three stages or more (core/tied_embeddings.h), first and last stage
  // only: the link with the other end. Null otherwise (two stages: the TIED frames ride on the
  // neighbours' link).
  std::unique_ptr<FrameSender> tied_out;
  std::unique_ptr<FrameReceiver> tied_in;
  // Replicas (JobSpec::replicas): the secure sums of this stage's replicas through the gateway
  // (proto Purpose SUM): masked vectors out, sums in; `mask` adds this replica's pairwise masks of
  // a round (crypto/pairwise_masks.h; each round's label unique). Null without replicas.
  std::unique_ptr<FrameSender> sum_out;
  std::unique_ptr<FrameReceiver> sum_in;
  std::function<absl::Status(absl::string_view round, std::span<uint32_t> words)> mask;
  // Knowledge sharing (core/teach_links.h), the student's last stage: the teacher's targets (bytes
  // of TEACH frames from the teacher's last stage) in, the pace out to the teacher's first stage;
  // the teacher's first stage: the pace in. Null otherwise.
  std::unique_ptr<FrameReceiver> teacher_in;
  std::unique_ptr<FrameSender> pace_out;
  std::unique_ptr<FrameReceiver> pace_in;
};

// The shape of `samples` x `features` activations (or their gradients) on a link: one row per
// token, [samples x tokens, dim], for models of token sequences (GPT, llama, ViT), whose
// boundaries carry the residual stream; [samples, features] otherwise. Codecs that work on rows
// (proj) take the last dimension as the row.
std::vector<int64_t> ActivationShape(const ModelSpec& model, int64_t samples, int64_t features);

// A tensor a pass hands to a link (a forward output, an input gradient): the pass writes out(),
// then StageFrames::Send hands it over. Host floats, or, for a stage that takes payloads
// (StageExecutor::boundary_payloads) on a link whose chain's first stage a backend runs, that
// stage's payload made with the seed of the link's next tensor. Not movable: out() points into it.
class OutgoingTensor {
 public:
  OutgoingTensor(const FrameSender& to, bool payloads, size_t floats);
  OutgoingTensor(const OutgoingTensor&) = delete;
  OutgoingTensor& operator=(const OutgoingTensor&) = delete;
  const BoundaryOut& out() const { return out_; }

 private:
  friend class StageFrames;
  std::vector<float> values_;
  std::vector<uint8_t> payload_;
  BoundaryOut out_;
};

class StageFrames {
 public:
  // Stage `index` of pipeline `replica` (JobView::replica) of `spec` in rollback `generation`.
  // `spec` and `metrics` must outlive this.
  StageFrames(const JobSpec& spec, int replica, int index, uint32_t generation, StageLinks links,
              SiteMetrics& metrics);

  const JobSpec& spec() const { return spec_; }
  int replica() const { return replica_; }
  int index() const { return index_; }
  uint32_t generation() const { return generation_; }
  SiteMetrics& metrics() { return metrics_; }
  const StageLinks& links() const { return links_; }

  // The key of a frame of this stage's job, generation and replica.
  v1::TensorKey Key(int64_t step, int microbatch, int boundary, v1::Direction direction,
                    v1::Purpose purpose = v1::TRAIN) const;

  // Takes the tensor of `key` from `from` (announced earlier with Expect). Blocks.
  absl::StatusOr<std::vector<float>> Receive(FrameReceiver& from, const v1::TensorKey& key);
  // The same for a tensor announced with FrameReceiver::ExpectBoundary.
  absl::StatusOr<DecodedBoundary> ReceiveBoundary(FrameReceiver& from, const v1::TensorKey& key);
  // Hands a tensor to `to`; blocks only while too much is in flight.
  absl::Status Send(FrameSender& to, const v1::TensorKey& key, std::vector<float> values,
                    std::vector<int64_t> shape);
  // The same for what a pass wrote into `tensor` (made for `to`); leaves `tensor` empty.
  absl::Status Send(FrameSender& to, const v1::TensorKey& key, OutgoingTensor& tensor,
                    std::vector<int64_t> shape);
  // The same for frames of bytes (a teacher's targets); the wait for them counts as
  // Timer::kTeacherWait too.
  absl::StatusOr<std::string> ReceiveTargets(FrameReceiver& from, const v1::TensorKey& key);
  absl::Status SendTargets(FrameSender& to, const v1::TensorKey& key, std::string bytes);

  // Blocks until the gateway holds everything sent.
  absl::Status Flush();
  // Makes waiting receivers and senders fail with `status`. Thread-safe.
  void Abort(const absl::Status& status);

 private:
  const JobSpec& spec_;
  const int replica_;
  const int index_;
  const uint32_t generation_;
  StageLinks links_;
  SiteMetrics& metrics_;
};

}  // namespace strait::site
