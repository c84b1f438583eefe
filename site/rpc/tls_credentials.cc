#include "site/rpc/tls_credentials.h"

#include "core/status.h"
#include "crypto/tls_policy.h"

namespace strait::site {

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeSiteChannelCredentials(
    const crypto::TlsMaterial& material) {
  STRAIT_RETURN_IF_ERROR(crypto::RequireTls13ForNewContexts());
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = material.ca_pem;
  options.pem_private_key = material.own.key_pem;
  options.pem_cert_chain = material.own.certificate_pem;
  return grpc::SslCredentials(options);
}

}  // namespace strait::site
