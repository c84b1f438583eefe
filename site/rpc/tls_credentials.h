// gRPC glue for the site's side of mutual TLS (DESIGN.md §5): channel credentials that present the
// site's certificate, trust only the federation CA and speak TLS 1.3 only, so a site talks to no
// gateway but one whose certificate the federation issued for the host it dials.
#pragma once

#include <grpcpp/security/credentials.h>

#include <memory>

#include "absl/status/statusor.h"
#include "crypto/certificates.h"

namespace strait::site {

// Channel credentials from the site's TLS material (crypto::LoadTlsMaterial with the site's
// certificate). The gateway's certificate must name the dialled host as a DNS or IP SAN. From the
// first call on, this process makes no TLS 1.2 connection (crypto::RequireTls13ForNewContexts).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeSiteChannelCredentials(
    const crypto::TlsMaterial& material);

}  // namespace strait::site
