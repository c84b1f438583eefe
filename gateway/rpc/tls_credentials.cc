#include "gateway/rpc/tls_credentials.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_context.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <openssl/conf.h>
#include <openssl/ssl.h>

#include <utility>

#include "absl/time/clock.h"
#include "core/status.h"
#include "crypto/openssl_check.h"

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

// The TLS settings every TLS context of this process starts from: TLS 1.3 only, and at least the
// security level Debian's own configuration sets.
constexpr char kTls13Only[] = R"(strait_tls = strait_tls_init
[strait_tls_init]
ssl_conf = strait_ssl
[strait_ssl]
system_default = strait_tls13
[strait_tls13]
Protocol = -ALL, TLSv1.3
MinProtocol = TLSv1.3
CipherString = DEFAULT:@SECLEVEL=2
)";

// Makes every TLS context this process creates from now on refuse TLS 1.2 and older. gRPC 1.51
// (Debian 12) has no setting for the TLS versions of server credentials (it came with gRPC 1.60)
// and sets TLS 1.2 as the minimum of each context it creates. OpenSSL applies the configuration's
// `system_default` section to a new context before that, and a version disabled there by
// `Protocol` (SSL_OP_NO_TLSv1_2) stays disabled whatever minimum is set afterwards. The section is
// loaded from memory, not from a file an operator could edit. Idempotent.
absl::Status RequireTls13ForNewContexts() {
  static const absl::Status loaded = []() -> absl::Status {
    // OpenSSL reads its configuration file once, at the first initialisation: done here first so
    // that it cannot replace this process's settings later.
    STRAIT_OPENSSL_CHECK(OPENSSL_init_ssl(OPENSSL_INIT_LOAD_CONFIG, nullptr));
    crypto::BioPtr text(BIO_new_mem_buf(kTls13Only, sizeof(kTls13Only) - 1));
    STRAIT_OPENSSL_CHECK(text.get());
    std::unique_ptr<CONF, crypto::OpenSslDeleter<NCONF_free>> config(NCONF_new(nullptr));
    STRAIT_OPENSSL_CHECK(config.get());
    long error_line = 0;
    STRAIT_OPENSSL_CHECK(NCONF_load_bio(config.get(), text.get(), &error_line));
    STRAIT_OPENSSL_CHECK(CONF_modules_load(config.get(), "strait_tls", 0));
    return absl::OkStatus();
  }();
  return loaded;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeGatewayServerCredentials(
    const crypto::TlsMaterial& material, std::shared_ptr<const RevocationList> revoked) {
  STRAIT_ASSIGN_OR_RETURN(crypto::CertificateVerifier ca,
                          crypto::CertificateVerifier::Create(material.ca_pem));
  STRAIT_RETURN_IF_ERROR(RequireTls13ForNewContexts());
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
