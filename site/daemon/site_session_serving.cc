// SiteSession (site/daemon/site_session.h) of a serving federation: decoding requests instead of
// training (docs/distillation.md).
#include <spdlog/spdlog.h>

#include "absl/strings/str_format.h"
#include "core/status.h"
#include "site/daemon/site_session.h"
#include "site/daemon/stage_link_builder.h"

namespace strait::site {

void SiteSession::TakeServeRequest(const v1::ServeRequest& request) {
  std::lock_guard<std::mutex> lock(serve_mu_);
  if (server_ != nullptr) {
    server_->Push(request);
  } else {
    serve_pending_.push_back(request);
  }
}

absl::Status SiteSession::ServeGeneration(GatewayConnector& connector, const v1::Rollback& begin) {
  STRAIT_ASSIGN_OR_RETURN(auto peer_keys,
                          keys_.WaitFor(peers_, std::chrono::minutes(10), std::chrono::seconds(10),
                                        [](const std::string& missing) {
                                          spdlog::info("waiting for the key of {}", missing);
                                        }));
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<KvDecoder> decoder, options_.serve());
  const LinkSealing sealing{.security = connector.security(),
                            .peers = &peer_keys,
                            .generation = begin.generation(),
                            .replica = 0};
  StageServer server(spec_, options_.index, begin.generation(), std::move(decoder),
                     [&](const v1::ServeRequest& request) {
                       return BuildServeLinks(spec_, options_.index, connector.link(), sealing,
                                              request, metrics_);
                     });
  {
    std::lock_guard<std::mutex> lock(serve_mu_);
    for (const v1::ServeRequest& request : serve_pending_) server.Push(request);
    serve_pending_.clear();
    server_ = &server;
  }
  control_.SetActive(&server);
  report_.Print(absl::StrFormat("serving (generation %d)", begin.generation()));
  absl::Status result;
  while (result.ok()) {
    absl::StatusOr<StepResult> served = server.Step(/*then_evaluate=*/false);
    if (served.ok()) {
      spdlog::info("served request {}", server.step());
    } else if (control_.Interrupted() || server.aborted()) {
      result = served.status();
    } else {  // One request failed (a frame refused, a client that went away): serve the next.
      spdlog::warn("a request failed: {}", std::string(served.status().message()));
    }
  }
  control_.SetActive(nullptr);
  std::lock_guard<std::mutex> lock(serve_mu_);
  server_ = nullptr;
  return result;
}

}  // namespace strait::site
