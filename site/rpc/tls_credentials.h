// gRPC glue for the site's side of mutual TLS (DESIGN.md §5): channel credentials that present the
// site's certificate and trust only the federation CA, so a site talks to no gateway but one whose
// certificate the federation issued for the host it dials.
#pragma once

#include <grpcpp/security/credentials.h>

#include <memory>

#include "crypto/certificates.h"

namespace strait::site {

// Channel credentials from the site's TLS material (crypto::LoadTlsMaterial with the site's
// certificate). The gateway's certificate must name the dialled host as a DNS or IP SAN.
std::shared_ptr<grpc::ChannelCredentials> MakeSiteChannelCredentials(
    const crypto::TlsMaterial& material);

}  // namespace strait::site
