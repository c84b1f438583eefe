// The gateway's side of serving text (docs/distillation.md): a client the job names asks a serving
// federation to sample. The gateway gives the client a request id and the first and last stage's
// signed keys, stores the client's sealed prompt in the mailbox for the first stage, tells every
// stage of the request (a ServeRequest control), and collects the tokens the last stage sealed for
// the client, in position order. It reads none of them. Requests from any other certificate are
// refused and counted (rejected_by_reason "unauthorized_client").
//
// Thread-safe. Generate answers through `done`, from a mailbox callback or the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "gateway/mailbox/mailbox.h"
#include "gateway/membership/federation.h"
#include "strait/v1/gateway.pb.h"

namespace strait::gateway {

class ServingGate {
 public:
  // `spec`, `mailbox` and `federation` must outlive the gate; prompts up to `max_frame_bytes`.
  ServingGate(const JobSpec& spec, Mailbox& mailbox, Federation& federation,
              uint64_t max_frame_bytes)
      : spec_(spec),
        mailbox_(mailbox),
        federation_(federation),
        max_frame_bytes_(max_frame_bytes) {}

  // For client `client` (its verified certificate id).
  absl::StatusOr<v1::ServeKeysReply> Keys(const std::string& client);
  void Generate(const std::string& client, const v1::GenerateRequest& request,
                std::function<void(absl::StatusOr<v1::GenerateReply>)> done);

  // What was served so far, for the dashboard.
  v1::ServingState State() const;

 private:
  // PERMISSION_DENIED (counted) unless `client` is one of the job's serving.clients.
  absl::Status Authorize(const std::string& client);
  // The checks of a request's prompt frame against the job and the request ids handed out.
  absl::Status CheckPrompt(const v1::GenerateRequest& request) const;
  struct Call;
  void PullNext(std::shared_ptr<Call> call);

  const JobSpec& spec_;
  Mailbox& mailbox_;
  Federation& federation_;
  const uint64_t max_frame_bytes_;
  std::atomic<uint64_t> next_request_{1};
  mutable std::mutex mu_;
  v1::ServingState state_;
};

}  // namespace strait::gateway
