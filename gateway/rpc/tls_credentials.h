// gRPC glue for the gateway's side of mutual TLS (DESIGN.md §5, docs/security.md).
//
// The TLS handshake requires a client certificate that chains to the federation CA, is inside its
// validity period and is meant for client use. On top, every call is checked by an auth metadata
// processor: the certificate must carry a valid site identity and must not be on the deny list
// (crypto::VerifySiteCertificate). Handlers then learn who is calling with PeerSiteId.
#pragma once

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "crypto/certificates.h"
#include "crypto/deny_list.h"

namespace strait::gateway {

// The deny list the gateway enforces, replaceable while it serves (after the file changed).
// Thread-safe; Current() returns a snapshot that stays valid while the caller holds it.
class RevocationList {
 public:
  explicit RevocationList(crypto::DenyList list = {});
  void Replace(crypto::DenyList list);
  std::shared_ptr<const crypto::DenyList> Current() const;

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const crypto::DenyList> list_;  // Guarded by mu_.
};

// Server credentials from the gateway's TLS material (crypto::LoadTlsMaterial with the gateway
// certificate). `revoked` is shared with the caller, who may Replace its list at any time.
// kInvalidArgument when the CA certificate does not parse.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeGatewayServerCredentials(
    const crypto::TlsMaterial& material, std::shared_ptr<const RevocationList> revoked);

// The site id of the peer of `context`, from the client certificate the handshake verified.
// kUnauthenticated when the call carries no site certificate (e.g. an insecure server in a test).
absl::StatusOr<std::string> PeerSiteId(const grpc::ServerContextBase& context);

}  // namespace strait::gateway
