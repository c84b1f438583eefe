#include "gateway/rpc/tls_credentials.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_context.h>
#include <grpcpp/security/auth_metadata_processor.h>

#include <utility>

#include "absl/time/clock.h"
#include "core/status.h"
#include "crypto/tls_policy.h"

namespace strait::gateway {
namespace {

// The verified client certificate of a connection, or empty.
std::string PeerCertificatePem(const grpc::AuthContext& context) {
  const std::vector<grpc::string_ref> values =
      context.FindPropertyValues(GRPC_X509_PEM_CERT_PROPERTY_NAME);
  return values.empty() ? "" : std::string(values.front().data(), values.front().size());
}

// Admits a call only from a site certificate that is not revoked; runs for every call.
class SiteAuthProcessor : public grpc::AuthMetadataProcessor {
 public:
  SiteAuthProcessor(crypto::CertificateVerifier ca, std::shared_ptr<const RevocationList> revoked)
      : ca_(std::move(ca)), revoked_(std::move(revoked)) {}

  grpc::Status Process(const InputMetadata&, grpc::AuthContext* context, OutputMetadata*,
                       OutputMetadata*) override {
    const std::string pem = PeerCertificatePem(*context);
    if (pem.empty()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no client certificate");
    }
    const absl::StatusOr<std::string> site = ca_.VerifySite(pem, *revoked_->Current(), absl::Now());
    if (!site.ok()) {
      return grpc::Status(site.status().code() == absl::StatusCode::kPermissionDenied
                              ? grpc::StatusCode::PERMISSION_DENIED
                              : grpc::StatusCode::UNAUTHENTICATED,
                          std::string(site.status().message()));
    }
    return grpc::Status::OK;
  }

 private:
  const crypto::CertificateVerifier ca_;
  const std::shared_ptr<const RevocationList> revoked_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeGatewayServerCredentials(
    const crypto::TlsMaterial& material, std::shared_ptr<const RevocationList> revoked) {
  STRAIT_ASSIGN_OR_RETURN(crypto::CertificateVerifier ca,
                          crypto::CertificateVerifier::Create(material.ca_pem));
  STRAIT_RETURN_IF_ERROR(crypto::RequireTls13ForNewContexts());
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = material.ca_pem;
  options.pem_key_cert_pairs.push_back({material.own.key_pem, material.own.certificate_pem});
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::SslServerCredentials(options);
  credentials->SetAuthMetadataProcessor(
      std::make_shared<SiteAuthProcessor>(std::move(ca), std::move(revoked)));
  return credentials;
}

absl::StatusOr<std::string> PeerSiteId(const grpc::ServerContextBase& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  const std::string pem = auth ? PeerCertificatePem(*auth) : "";
  if (pem.empty()) return absl::UnauthenticatedError("the call carries no client certificate");
  return crypto::SiteIdOfCertificate(pem);
}

}  // namespace strait::gateway
