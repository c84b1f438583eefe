// This site's side of the key exchange with its neighbours (DESIGN.md §5): a fresh ephemeral key
// per join epoch, signed with the site's certificate key for the JoinRequest; each neighbour's
// signed key (from the JoinReply or a neighbour_key control message) verified against the
// federation CA, and the link's per-direction Sealer and Opener derived from it. The gateway relays
// keys but can neither read nor forge what they protect.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "crypto/aead.h"
#include "crypto/certificates.h"
#include "crypto/deny_list.h"
#include "crypto/key_exchange.h"
#include "strait/v1/federation.pb.h"

namespace strait::site {

class LinkSecurity {
 public:
  // `site`: this site's certificate and key (its TLS client material); `ca_pem`: the federation CA.
  static absl::StatusOr<std::unique_ptr<LinkSecurity>> Create(const std::string& federation,
                                                              uint32_t epoch,
                                                              const crypto::CertifiedKey& site,
                                                              const std::string& ca_pem,
                                                              crypto::DenyList deny_list = {});

  // This site's signed ephemeral key, for JoinRequest.key.
  const v1::SignedKey& own_key() const { return own_key_; }

  // The keys of the link to `neighbour_id`, derived from its signed key after verifying it.
  struct LinkCrypto {
    std::unique_ptr<crypto::Sealer> sealer;  // What this site sends to the neighbour.
    std::unique_ptr<crypto::Opener> opener;  // What the neighbour sends to this site.
    uint32_t key_epoch = 0;
  };
  // `rotate_bytes`: the sealer's byte budget (the link's rotate_bytes). `generation`: the
  // federation's rollback generation (fresh keys for each). `purpose`: keys apart from the link's
  // for another use (crypto::DeriveLinkKeys). UNAUTHENTICATED or PERMISSION_DENIED when the key is
  // not the neighbour's (wrong CA, identity, signature, revoked).
  absl::StatusOr<LinkCrypto> Derive(const std::string& neighbour_id, const v1::SignedKey& neighbour,
                                    uint64_t rotate_bytes, uint32_t generation = 0,
                                    absl::string_view purpose = {}) const;

  // Secure aggregation (crypto/pairwise_masks.h) among the replicas of this site's stage: the
  // other replica `id`'s signed key, verified as Derive does, as the end of a pairwise mask.
  absl::StatusOr<crypto::LinkEnd> VerifiedEnd(const std::string& id,
                                              const v1::SignedKey& key) const;
  // Adds this site's pairwise masks of `round` with `peers` (from VerifiedEnd) to `words`.
  absl::Status AddMasks(absl::string_view round, std::span<const crypto::LinkEnd> peers,
                        std::span<uint32_t> words) const;

 private:
  LinkSecurity(std::string federation, uint32_t epoch, crypto::EphemeralKey key,
               crypto::CertificateVerifier ca, crypto::DenyList deny_list)
      : federation_(std::move(federation)),
        epoch_(epoch),
        key_(std::move(key)),
        ca_(std::move(ca)),
        deny_list_(std::move(deny_list)) {}

  std::string federation_;
  uint32_t epoch_;
  std::string site_id_;
  crypto::EphemeralKey key_;
  crypto::CertificateVerifier ca_;
  crypto::DenyList deny_list_;
  v1::SignedKey own_key_;
};

}  // namespace strait::site
