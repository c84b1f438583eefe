#include "site/rpc/serve_client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/rpc/tls_credentials.h"
#include "strait/v1/gateway.grpc.pb.h"

namespace strait::site {
namespace {

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

std::chrono::system_clock::time_point In(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             std::chrono::duration<double>(seconds));
}

}  // namespace

struct ServeClient::Channel {
  std::unique_ptr<v1::Gateway::Stub> gateway;
};

ServeClient::ServeClient(std::unique_ptr<Channel> channel) : channel_(std::move(channel)) {}
ServeClient::~ServeClient() = default;

absl::StatusOr<std::unique_ptr<ServeClient>> ServeClient::Connect(const std::string& address,
                                                                  const crypto::TlsMaterial& tls) {
  STRAIT_ASSIGN_OR_RETURN(auto credentials, MakeSiteChannelCredentials(tls));
  auto channel = std::make_unique<Channel>();
  channel->gateway = v1::Gateway::NewStub(grpc::CreateChannel(address, credentials));
  return std::unique_ptr<ServeClient>(new ServeClient(std::move(channel)));
}

absl::StatusOr<v1::ServeKeysReply> ServeClient::Keys() {
  grpc::ClientContext context;
  context.set_deadline(In(30));
  v1::ServeKeysReply reply;
  STRAIT_RETURN_IF_ERROR(FromGrpc(
      channel_->gateway->ServeKeys(&context, v1::ServeKeysRequest(), &reply), "the gateway"));
  return reply;
}

absl::StatusOr<v1::GenerateReply> ServeClient::Generate(const v1::GenerateRequest& request,
                                                        double timeout_s) {
  grpc::ClientContext context;
  context.set_deadline(In(timeout_s));
  v1::GenerateReply reply;
  STRAIT_RETURN_IF_ERROR(
      FromGrpc(channel_->gateway->Generate(&context, request, &reply), "the federation"));
  return reply;
}

}  // namespace strait::site
