// gRPC glue for the gateway's side of mutual TLS (DESIGN.md §5, docs/security.md).
//
// The TLS handshake is TLS 1.3 only and requires a client certificate that chains to the
// federation CA, is inside its validity period and is meant for client use. On top, every call is
// checked by an auth metadata processor: the certificate must carry a valid site identity and must
// not be on the deny list (crypto::VerifySiteCertificate). Handlers then learn who is calling with
// PeerSiteId.
#pragma once

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "crypto/certificates.h"
#include "gateway/rpc/revocation_list.h"

namespace strait::gateway {

// Server credentials from the gateway's TLS material (crypto::LoadTlsMaterial with the gateway
// certificate). `revoked` is shared with the caller, who may Replace its list at any time.
// kInvalidArgument when the CA certificate does not parse; kInternal when OpenSSL refuses the
// TLS 1.3-only setting. Process-wide side effect: every TLS context the process creates from then
// on (gRPC's included, client or server) refuses TLS 1.2 and older, since gRPC 1.51 offers no
// per-credential setting (see the .cc).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeGatewayServerCredentials(
    const crypto::TlsMaterial& material, std::shared_ptr<const RevocationList> revoked);

// The site id of the peer of `context`, from the client certificate the handshake verified.
// kUnauthenticated when the call carries no site certificate.
absl::StatusOr<std::string> PeerSiteId(const grpc::ServerContextBase& context);

}  // namespace strait::gateway
