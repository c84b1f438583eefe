// One site's part of serving text through a federation (docs/distillation.md): its layers of a GPT
// decode the positions of one request after another with a key/value cache (KvDecoder), so a new
// token costs one position on every site. The first stage takes the prompt's tokens (sealed by the
// client) and then each sampled token (from the last stage), the others the residual rows of the
// stage before; the last stage samples (as `strait generate` does: SampleToken with the draws of
// its seed) and sends each token sealed to the client and to the first stage. Its weights and its
// cache never leave the site. For the serving thread, except Abort.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "core/job_spec.h"
#include "site/nn/kv_decoder.h"
#include "site/pipeline/frame_receiver.h"
#include "site/pipeline/frame_sender.h"
#include "site/pipeline/generation_runner.h"
#include "site/pipeline/site_metrics.h"
#include "strait/v1/gateway.pb.h"

namespace strait::site {

// A request's links (proto Purpose SERVE keys), made for its client's key.
struct ServeLinks {
  std::unique_ptr<FrameReceiver> in;         // First stage: the prompt; others: rows from before.
  std::unique_ptr<FrameReceiver> tokens_in;  // First of several stages: tokens from the last.
  std::unique_ptr<FrameSender> out;          // Rows to the next stage (all but the last).
  std::unique_ptr<FrameSender> tokens_out;   // Last of several stages: tokens to the first.
  std::unique_ptr<FrameSender> client_out;   // Last stage: tokens for the client.
};
using ServeLinkMaker = std::function<absl::StatusOr<ServeLinks>(const v1::ServeRequest& request)>;

// Serves requests as they arrive (Push), one at a time. As a GenerationRunner for the session's
// control: Step serves the next request (blocking until one arrives), step() counts them.
class StageServer : public GenerationRunner {
 public:
  // Stage `index` of `spec` with `decoder` (its layers and weights), in rollback `generation`.
  StageServer(const JobSpec& spec, int index, uint32_t generation,
              std::unique_ptr<KvDecoder> decoder, ServeLinkMaker make_links);

  // A request the gateway announced (thread-safe); one of another generation is dropped.
  void Push(const v1::ServeRequest& request);

  int64_t step() const override { return served_; }
  int64_t updates() const override { return 0; }
  absl::StatusOr<StepResult> Step(bool then_evaluate) override;
  absl::StatusOr<std::optional<Evaluation>> Evaluate() override { return std::nullopt; }
  std::optional<std::vector<float>> OuterState() const override { return std::nullopt; }
  absl::Status Flush() override { return absl::OkStatus(); }
  void Abort(const absl::Status& status) override;
  bool aborted() {
    std::lock_guard<std::mutex> lock(mu_);
    return !aborted_.ok();
  }

 private:
  v1::TensorKey Key(uint64_t request, int position, int boundary, v1::Direction direction) const;
  absl::Status Serve(const v1::ServeRequest& request, ServeLinks& links);

  const JobSpec& spec_;
  const int index_;
  const uint32_t generation_;
  std::unique_ptr<KvDecoder> decoder_;
  const ServeLinkMaker make_links_;
  int64_t served_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::ServeRequest> queue_;
  absl::Status aborted_;
  ServeLinks* current_ = nullptr;  // The links of the request being served (for Abort).
};

}  // namespace strait::site
