#include "site/rpc/tls_credentials.h"

namespace strait::site {

std::shared_ptr<grpc::ChannelCredentials> MakeSiteChannelCredentials(
    const crypto::TlsMaterial& material) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = material.ca_pem;
  options.pem_private_key = material.own.key_pem;
  options.pem_cert_chain = material.own.certificate_pem;
  return grpc::SslCredentials(options);
}

}  // namespace strait::site
