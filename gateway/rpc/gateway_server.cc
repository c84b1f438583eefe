#include "gateway/rpc/gateway_server.h"

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "core/frame_header.h"
#include "gateway/rpc/gateway_service.h"
#include "gateway/rpc/tls_credentials.h"

namespace strait::gateway {

GatewayServer::GatewayServer() = default;

GatewayServer::~GatewayServer() { Shutdown(std::chrono::seconds(2)); }

absl::StatusOr<std::unique_ptr<GatewayServer>> GatewayServer::Start(
    GatewayCore* core, SplitPlanning* planning, const GatewayServerOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeGatewayServerCredentials(options.tls, options.revoked);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<GatewayServer> server(new GatewayServer());
  server->service_ = std::make_unique<GatewayService>(core, planning);

  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, *credentials, &server->port_);
  builder.RegisterService(server->service_.get());
  // A chunk carries at most 1 MiB of body plus its header. Messages up to 4 MiB are read so that an
  // oversized chunk is answered with an error on a healthy stream; larger ones end the stream.
  builder.SetMaxReceiveMessageSize(4 << 20);
  builder.SetMaxSendMessageSize(static_cast<int>(kMaxChunkBytes + (64 << 10)));
  if (options.hook != nullptr) options.hook->AddTo(builder);
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    server->server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen, " (address in use or not local?)"));
  }
  return server;
}

void GatewayServer::Attach(GatewayCore& core) { service_->Attach(core); }

void GatewayServer::Shutdown(std::chrono::milliseconds grace) {
  if (server_ == nullptr) return;
  server_->Shutdown(std::chrono::system_clock::now() + grace);
  server_.reset();
}

}  // namespace strait::gateway
