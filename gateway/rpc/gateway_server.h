// The gateway's gRPC server (DESIGN.md §9: the wiring, apart from the handler logic): the Gateway
// service (gateway_service.h) on one listening address, over mutual TLS 1.3 (tls_credentials.h).
// The daemon starts and stops it through this header, which keeps gRPC's types out of everything
// but gateway/rpc/.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "crypto/certificates.h"
#include "gateway/exchange/gateway_core.h"
#include "gateway/membership/split_planning.h"
#include "gateway/rpc/revocation_list.h"
#include "gateway/rpc/server_hook.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace strait::gateway {

class GatewayService;

struct GatewayServerOptions {
  std::string listen;       // host:port; port 0 picks a free one.
  crypto::TlsMaterial tls;  // The federation CA and the gateway's certificate.
  // Certificates refused at every call; the caller may Replace the list while the server runs.
  std::shared_ptr<const RevocationList> revoked = std::make_shared<RevocationList>();
  // Tests only (server_hook.h); null in strait-gateway.
  std::shared_ptr<ServerHook> hook;
};

class GatewayServer {
 public:
  // Serves `core` as `options` say; with `layers: auto`, also `planning` (else null), and `core`
  // may be null until the split is planned (Attach): until then Join, Exchange and GetState answer
  // UNAVAILABLE with what the planning waits for. Both must outlive the server. INVALID_ARGUMENT
  // when the TLS material is unusable; UNAVAILABLE when the address cannot be listened on.
  static absl::StatusOr<std::unique_ptr<GatewayServer>> Start(GatewayCore* core,
                                                              SplitPlanning* planning,
                                                              const GatewayServerOptions& options);
  // Serves `core` (which must outlive the server) from now on; once, when Start had none.
  void Attach(GatewayCore& core);
  // Shutdown with a grace of 2 seconds, unless called already.
  ~GatewayServer();
  GatewayServer(const GatewayServer&) = delete;
  GatewayServer& operator=(const GatewayServer&) = delete;

  // The port the server listens on (the one picked when `listen` asked for port 0).
  int port() const { return port_; }
  // Stops accepting calls and cancels those still running after `grace`. Blocks until done;
  // idempotent. Not thread-safe.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  GatewayServer();

  std::unique_ptr<GatewayService> service_;
  std::unique_ptr<grpc::Server> server_;  // Null once shut down.
  int port_ = 0;
};

}  // namespace strait::gateway
