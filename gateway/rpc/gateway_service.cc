#include "gateway/rpc/gateway_service.h"

#include "gateway/rpc/exchange_reactor.h"
#include "gateway/rpc/status_conversion.h"

namespace strait::gateway {
namespace {

// A stream refused before it started: finishes at once with the error.
class RefusedStream : public grpc::ServerBidiReactor<v1::SiteMessage, v1::GatewayMessage> {
 public:
  explicit RefusedStream(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

absl::StatusOr<std::string> ClaimedIdentity(const grpc::CallbackServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("x-strait-site");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "insecure gateway: the client must name its site in the "
        "x-strait-site header");
  }
  return std::string(it->second.data(), it->second.size());
}

GatewayService::GatewayService(GatewayCore& core, PeerIdentity identity)
    : core_(core), identity_(std::move(identity)) {}

grpc::ServerUnaryReactor* GatewayService::Join(grpc::CallbackServerContext* context,
                                               const v1::JoinRequest* request,
                                               v1::JoinReply* reply) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> peer = identity_(*context);
  if (!peer.ok()) {
    core_.federation().CountRejected("unauthenticated", std::string(peer.status().message()));
    reactor->Finish(ToGrpcStatus(peer.status()));
    return reactor;
  }
  absl::StatusOr<v1::JoinReply> joined =
      core_.federation().Join(*peer, *request, Federation::Clock::now());
  if (!joined.ok()) {
    core_.federation().CountRejected("join_refused", std::string(joined.status().message()));
    reactor->Finish(ToGrpcStatus(joined.status()));
    return reactor;
  }
  *reply = std::move(*joined);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerBidiReactor<v1::SiteMessage, v1::GatewayMessage>* GatewayService::Exchange(
    grpc::CallbackServerContext* context) {
  absl::StatusOr<std::string> peer = identity_(*context);
  if (!peer.ok()) {
    core_.federation().CountRejected("unauthenticated", std::string(peer.status().message()));
    return new RefusedStream(peer.status());
  }
  return new ExchangeReactor(core_, *peer);
}

grpc::ServerUnaryReactor* GatewayService::GetState(grpc::CallbackServerContext* context,
                                                   const v1::GetStateRequest*,
                                                   v1::FederationState* reply) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  absl::StatusOr<std::string> peer = identity_(*context);
  if (!peer.ok()) {
    reactor->Finish(ToGrpcStatus(peer.status()));
    return reactor;
  }
  *reply = core_.Snapshot();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace strait::gateway
