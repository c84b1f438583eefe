// Mutual TLS for real: a gRPC server with the generated strait.v1.Gateway service on 127.0.0.1 and
// clients with good and bad certificates. The test service implements GetState only, answering
// with the caller's site id (PeerSiteId) in view.federation.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "crypto/certificates.h"
#include "gateway/rpc/tls_credentials.h"
#include "site/rpc/tls_credentials.h"
#include "strait/v1/gateway.grpc.pb.h"
#include "tests/unit/crypto/test_pki.h"

namespace strait {
namespace {

using crypto::testing::Pki;
using ::testing::HasSubstr;

// gRPC's c-ares resolver leaks a few bytes at exit (LeakSanitizer reports it in sanitizer builds);
// every address here is numeric or localhost, which the native resolver handles.
[[maybe_unused]] const int kNativeResolver = setenv("GRPC_DNS_RESOLVER", "native", 0);

class WhoAmIService final : public v1::Gateway::Service {
  grpc::Status GetState(grpc::ServerContext* context, const v1::GetStateRequest*,
                        v1::FederationState* reply) override {
    absl::StatusOr<std::string> site = gateway::PeerSiteId(*context);
    if (!site.ok()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(site.status().message()));
    }
    reply->mutable_view()->set_federation(*site);
    return grpc::Status::OK;
  }
};

class MtlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    revoked_ = std::make_shared<gateway::RevocationList>();
    grpc::ServerBuilder builder;
    auto credentials =
        gateway::MakeGatewayServerCredentials({Pki().ca.certificate_pem, Pki().gateway}, revoked_);
    ASSERT_TRUE(credentials.ok()) << credentials.status();
    builder.AddListeningPort("127.0.0.1:0", *credentials, &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }

  // Calls GetState with these credentials; returns the status and the federation field.
  std::pair<grpc::Status, std::string> Call(std::shared_ptr<grpc::ChannelCredentials> credentials,
                                            const std::string& host = "127.0.0.1") {
    auto channel = grpc::CreateChannel(absl::StrCat(host, ":", port_), credentials);
    auto stub = v1::Gateway::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::FederationState reply;
    grpc::Status status = stub->GetState(&context, v1::GetStateRequest(), &reply);
    return {status, reply.view().federation()};
  }
  std::pair<grpc::Status, std::string> CallAs(const crypto::CertifiedKey& site,
                                              const std::string& host = "127.0.0.1") {
    return Call(*site::MakeSiteChannelCredentials({Pki().ca.certificate_pem, site}), host);
  }

  WhoAmIService service_;
  std::shared_ptr<gateway::RevocationList> revoked_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(MtlsTest, ValidSiteIsIdentified) {
  auto [status, who] = CallAs(Pki().east);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(who, "east");
  std::tie(status, who) = CallAs(Pki().west);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(who, "west");
  // The gateway certificate names localhost as a DNS SAN too.
  std::tie(status, who) = CallAs(Pki().east, "localhost");
  ASSERT_TRUE(status.ok()) << status.error_message();
}

TEST_F(MtlsTest, RefusesCertificateFromAnotherCa) {
  EXPECT_FALSE(CallAs(Pki().east_other_ca).first.ok());
}

TEST_F(MtlsTest, RefusesExpiredCertificate) { EXPECT_FALSE(CallAs(Pki().east_expired).first.ok()); }

TEST_F(MtlsTest, RefusesNotYetValidCertificate) {
  EXPECT_FALSE(CallAs(Pki().east_not_yet).first.ok());
}

TEST_F(MtlsTest, RefusesClientWithoutCertificate) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = Pki().ca.certificate_pem;
  EXPECT_FALSE(Call(grpc::SslCredentials(options)).first.ok());
}

TEST_F(MtlsTest, RefusesGatewayCertificateAsClient) {
  EXPECT_FALSE(CallAs(Pki().gateway).first.ok());
}

TEST_F(MtlsTest, RefusesRevokedCertificateAndReloadsTheList) {
  ASSERT_TRUE(CallAs(Pki().west).first.ok());
  revoked_->Replace(*crypto::DenyList::Parse(
      crypto::DescribeCertificate(Pki().west.certificate_pem)->serial_hex, "deny"));
  auto [status, who] = CallAs(Pki().west);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("revoked"));
  EXPECT_TRUE(CallAs(Pki().east).first.ok());  // Others are unaffected.
}

TEST_F(MtlsTest, SiteRefusesGatewayOfAnotherFederation) {
  // A site trusting another CA does not talk to this gateway.
  crypto::TlsMaterial stranger{Pki().other_ca.certificate_pem, Pki().east_other_ca};
  EXPECT_FALSE(Call(*site::MakeSiteChannelCredentials(stranger)).first.ok());
}

}  // namespace
}  // namespace strait
