// The Gateway gRPC service (proto/strait/v1/gateway.proto) on the callback API: Join, GetState,
// Plan and Probe as unary reactors, one ExchangeReactor per Exchange stream. The peer's identity is
// the site id of the client certificate that the TLS handshake verified (tls_credentials.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "gateway/exchange/gateway_core.h"
#include "gateway/membership/split_planning.h"
#include "strait/v1/gateway.grpc.pb.h"

namespace strait::gateway {

class GatewayService final : public v1::Gateway::CallbackService {
 public:
  // `core` (null until Attach while the split is planned) and `planning` (null unless the job
  // says layers: auto) must outlive the service.
  GatewayService(GatewayCore* core, SplitPlanning* planning);
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
  // Serving (gateway/exchange/serving_gate.h).
  grpc::ServerUnaryReactor* ServeKeys(grpc::CallbackServerContext* context,
                                      const v1::ServeKeysRequest* request,
                                      v1::ServeKeysReply* reply) override;
  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const v1::GenerateRequest* request,
                                     v1::GenerateReply* reply) override;

 private:
  // The core, or UNAVAILABLE saying what the planning of the split waits for.
  absl::StatusOr<GatewayCore*> Core() const;

  std::atomic<GatewayCore*> core_;
  SplitPlanning* const planning_;
};

}  // namespace strait::gateway
