#include "gateway/rpc/gateway_service.h"

#include <mutex>
#include <optional>

#include "gateway/rpc/exchange_reactor.h"
#include "gateway/rpc/status_conversion.h"
#include "gateway/rpc/tls_credentials.h"

namespace strait::gateway {
namespace {

// A stream refused before it started: finishes at once with the error.
class RefusedStream : public grpc::ServerBidiReactor<v1::SiteMessage, v1::GatewayMessage> {
 public:
  explicit RefusedStream(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

// A Plan call: answered when SplitPlanning says (at once, or when the plan is made); a call that
// ends first is forgotten there, which answers it. An answer that comes while Start is still in
// Submit waits for Start to finish the call, so that nothing touches the reactor after Finish.
class PlanReactor : public grpc::ServerUnaryReactor {
 public:
  PlanReactor(SplitPlanning& planning, v1::PlanReply* reply) : planning_(planning), reply_(reply) {}

  void Start(const std::string& site, const v1::PlanRequest& request) {
    const uint64_t ticket = planning_.Submit(
        site, request, [this](absl::StatusOr<v1::PlanReply> answer) { Answer(std::move(answer)); });
    std::optional<grpc::Status> finish;
    bool forget = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ticket_ = ticket;
      started_ = true;
      finish = std::move(pending_);
      forget = cancelled_ && !finish;
    }
    if (finish) {
      Finish(*finish);
    } else if (forget) {
      planning_.Forget(ticket);
    }
  }

  void OnCancel() override {
    uint64_t ticket = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      if (started_) ticket = ticket_;
    }
    if (ticket != 0) planning_.Forget(ticket);
  }
  void OnDone() override { delete this; }

 private:
  void Answer(absl::StatusOr<v1::PlanReply> answer) {
    const grpc::Status status = ToGrpcStatus(answer.status());
    if (answer.ok()) *reply_ = *std::move(answer);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!started_) {
        pending_ = status;
        return;
      }
    }
    Finish(status);
  }

  SplitPlanning& planning_;
  v1::PlanReply* const reply_;
  std::mutex mu_;
  uint64_t ticket_ = 0;
  bool started_ = false, cancelled_ = false;
  std::optional<grpc::Status> pending_;  // An answer that came inside Submit.
};

}  // namespace

GatewayService::GatewayService(GatewayCore* core, SplitPlanning* planning)
    : core_(core), planning_(planning) {}

absl::StatusOr<GatewayCore*> GatewayService::Core() const {
  if (GatewayCore* core = core_.load(std::memory_order_acquire)) return core;
  return absl::UnavailableError(planning_ != nullptr ? planning_->Description().front()
                                                     : "the gateway is starting");
}

grpc::ServerUnaryReactor* GatewayService::Join(grpc::CallbackServerContext* context,
                                               const v1::JoinRequest* request,
                                               v1::JoinReply* reply) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<GatewayCore*> core = Core();
  if (!core.ok()) {
    reactor->Finish(ToGrpcStatus(core.status()));
    return reactor;
  }
  absl::StatusOr<std::string> peer = PeerSiteId(*context);
  if (!peer.ok()) {
    (*core)->federation().CountRejected("unauthenticated", std::string(peer.status().message()));
    reactor->Finish(ToGrpcStatus(peer.status()));
    return reactor;
  }
  absl::StatusOr<v1::JoinReply> joined =
      (*core)->federation().Join(*peer, *request, Federation::Clock::now());
  if (!joined.ok()) {
    (*core)->federation().CountRejected("join_refused", std::string(joined.status().message()));
    reactor->Finish(ToGrpcStatus(joined.status()));
    return reactor;
  }
  *reply = std::move(*joined);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerBidiReactor<v1::SiteMessage, v1::GatewayMessage>* GatewayService::Exchange(
    grpc::CallbackServerContext* context) {
  absl::StatusOr<GatewayCore*> core = Core();
  if (!core.ok()) return new RefusedStream(core.status());
  absl::StatusOr<std::string> peer = PeerSiteId(*context);
  if (!peer.ok()) {
    (*core)->federation().CountRejected("unauthenticated", std::string(peer.status().message()));
    return new RefusedStream(peer.status());
  }
  return new ExchangeReactor(**core, *peer);
}

grpc::ServerUnaryReactor* GatewayService::GetState(grpc::CallbackServerContext* context,
                                                   const v1::GetStateRequest*,
                                                   v1::FederationState* reply) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> peer = PeerSiteId(*context);
  if (!peer.ok()) {
    reactor->Finish(ToGrpcStatus(peer.status()));
    return reactor;
  }
  if (GatewayCore* core = core_.load(std::memory_order_acquire)) *reply = core->Snapshot();
  if (planning_ != nullptr) {
    for (const std::string& line : planning_->Description()) reply->add_plan(line);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* GatewayService::Plan(grpc::CallbackServerContext* context,
                                               const v1::PlanRequest* request,
                                               v1::PlanReply* reply) {
  absl::StatusOr<std::string> peer = PeerSiteId(*context);
  absl::Status refused = peer.status();
  if (refused.ok() && planning_ == nullptr) {
    refused = absl::FailedPreconditionError(
        "this federation's job spec gives every site its layers: there is no split to plan");
  }
  if (!refused.ok()) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    reactor->Finish(ToGrpcStatus(refused));
    return reactor;
  }
  auto* reactor = new PlanReactor(*planning_, reply);
  reactor->Start(*peer, *request);
  return reactor;
}

grpc::ServerUnaryReactor* GatewayService::Probe(grpc::CallbackServerContext* context,
                                                const v1::ProbeRequest*, v1::ProbeReply*) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(PeerSiteId(*context).status()));
  return reactor;
}

grpc::ServerUnaryReactor* GatewayService::ServeKeys(grpc::CallbackServerContext* context,
                                                    const v1::ServeKeysRequest*,
                                                    v1::ServeKeysReply* reply) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<GatewayCore*> core = Core();
  absl::StatusOr<std::string> peer = PeerSiteId(*context);
  absl::StatusOr<v1::ServeKeysReply> keys = !core.ok()   ? core.status()
                                            : !peer.ok() ? peer.status()
                                                         : (*core)->serving().Keys(*peer);
  if (keys.ok()) *reply = *std::move(keys);
  reactor->Finish(ToGrpcStatus(keys.status()));
  return reactor;
}

grpc::ServerUnaryReactor* GatewayService::Generate(grpc::CallbackServerContext* context,
                                                   const v1::GenerateRequest* request,
                                                   v1::GenerateReply* reply) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<GatewayCore*> core = Core();
  absl::StatusOr<std::string> peer = PeerSiteId(*context);
  if (!core.ok() || !peer.ok()) {
    reactor->Finish(ToGrpcStatus(!core.ok() ? core.status() : peer.status()));
    return reactor;
  }
  // Answered when the last token is in (from a mailbox callback), or at once when refused.
  (*core)->serving().Generate(*peer, *request,
                              [reactor, reply](absl::StatusOr<v1::GenerateReply> answer) {
                                if (answer.ok()) *reply = *std::move(answer);
                                reactor->Finish(ToGrpcStatus(answer.status()));
                              });
  return reactor;
}

}  // namespace strait::gateway
