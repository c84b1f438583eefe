// A seam through which a test's own gateway executable adds to the gRPC server as it is built, for
// example a server interceptor that injects a fault (DESIGN.md §9: test hooks live in test code).
// strait-gateway passes none; the server is then built as if the seam did not exist, and nothing
// is checked per call. gRPC's types are only forward-declared here, so that the daemon and its
// options stay free of grpcpp (only gateway/rpc/ and test code include it).
#pragma once

namespace grpc {
class ServerBuilder;
}  // namespace grpc

namespace strait::gateway {

class ServerHook {
 public:
  virtual ~ServerHook() = default;
  // Called once by GatewayServer::Start, after the service and the listening port are registered
  // and before the server is built; may add to `builder` (e.g.
  // builder.experimental().SetInterceptorCreators(...)).
  virtual void AddTo(grpc::ServerBuilder& builder) = 0;
};

}  // namespace strait::gateway
