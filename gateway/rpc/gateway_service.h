// The Gateway gRPC service (proto/strait/v1/gateway.proto) on the callback API: Join, GetState,
// Plan and Probe as unary reactors, one ExchangeReactor per Exchange stream. The peer's identity
// comes from a function the server is built with (the verified TLS certificate; a header with
// --insecure).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "gateway/exchange/gateway_core.h"
#include "gateway/membership/split_planning.h"
#include "strait/v1/gateway.grpc.pb.h"

namespace strait::gateway {

// Returns the site id of the peer of a call, or an error (the call is refused with it).
using PeerIdentity = std::function<absl::StatusOr<std::string>(const grpc::CallbackServerContext&)>;

// The identity a client claims in the "x-strait-site" metadata header: for --insecure runs only.
absl::StatusOr<std::string> ClaimedIdentity(const grpc::CallbackServerContext& context);

class GatewayService final : public v1::Gateway::CallbackService {
 public:
  // `core` (null until Attach while the split is planned) and `planning` (null unless the job
  // says layers: auto) must outlive the service.
  GatewayService(GatewayCore* core, SplitPlanning* planning, PeerIdentity identity);
  // Serves `core` from now on (once the split is planned).
  void Attach(GatewayCore& core) { core_.store(&core, std::memory_order_release); }

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* context,
                                 const v1::JoinRequest* request, v1::JoinReply* reply) override;
  grpc::ServerBidiReactor<v1::SiteMessage, v1::GatewayMessage>* Exchange(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* GetState(grpc::CallbackServerContext* context,
                                     const v1::GetStateRequest* request,
                                     v1::FederationState* reply) override;
  grpc::ServerUnaryReactor* Plan(grpc::CallbackServerContext* context,
                                 const v1::PlanRequest* request, v1::PlanReply* reply) override;
  grpc::ServerUnaryReactor* Probe(grpc::CallbackServerContext* context,
                                  const v1::ProbeRequest* request, v1::ProbeReply* reply) override;

 private:
  // The core, or UNAVAILABLE saying what the planning of the split waits for.
  absl::StatusOr<GatewayCore*> Core() const;

  std::atomic<GatewayCore*> core_;
  SplitPlanning* const planning_;
  PeerIdentity identity_;
};

}  // namespace strait::gateway
