// The Gateway gRPC service (proto/strait/v1/gateway.proto) on the callback API: Join and GetState
// as unary reactors, one ExchangeReactor per Exchange stream. The peer's identity comes from a
// function the server is built with (the verified TLS certificate; a header with --insecure).
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "gateway/exchange/gateway_core.h"
#include "strait/v1/gateway.grpc.pb.h"

namespace strait::gateway {

// Returns the site id of the peer of a call, or an error (the call is refused with it).
using PeerIdentity = std::function<absl::StatusOr<std::string>(const grpc::CallbackServerContext&)>;

// The identity a client claims in the "x-strait-site" metadata header: for --insecure runs only.
absl::StatusOr<std::string> ClaimedIdentity(const grpc::CallbackServerContext& context);

class GatewayService final : public v1::Gateway::CallbackService {
 public:
  // `core` must outlive the service.
  GatewayService(GatewayCore& core, PeerIdentity identity);

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* context,
                                 const v1::JoinRequest* request, v1::JoinReply* reply) override;
  grpc::ServerBidiReactor<v1::SiteMessage, v1::GatewayMessage>* Exchange(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* GetState(grpc::CallbackServerContext* context,
                                     const v1::GetStateRequest* request,
                                     v1::FederationState* reply) override;

 private:
  GatewayCore& core_;
  PeerIdentity identity_;
};

}  // namespace strait::gateway
