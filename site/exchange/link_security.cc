#include "site/exchange/link_security.h"

#include "core/status.h"
#include "crypto/pairwise_masks.h"

namespace strait::site {
namespace {

crypto::SignedKey FromProto(const v1::SignedKey& key) {
  return {key.site_id(), key.epoch(), key.public_key(), key.signature(), key.certificate_pem()};
}

}  // namespace

absl::StatusOr<std::unique_ptr<LinkSecurity>> LinkSecurity::Create(const std::string& federation,
                                                                   uint32_t epoch,
                                                                   const crypto::CertifiedKey& site,
                                                                   const std::string& ca_pem,
                                                                   crypto::DenyList deny_list) {
  STRAIT_ASSIGN_OR_RETURN(crypto::KeySigner signer, crypto::KeySigner::Create(site));
  STRAIT_ASSIGN_OR_RETURN(crypto::EphemeralKey key, crypto::EphemeralKey::Generate());
  STRAIT_ASSIGN_OR_RETURN(crypto::CertificateVerifier ca,
                          crypto::CertificateVerifier::Create(ca_pem));
  STRAIT_ASSIGN_OR_RETURN(crypto::SignedKey signed_key, signer.Sign(federation, epoch, key));
  std::unique_ptr<LinkSecurity> security(
      new LinkSecurity(federation, epoch, std::move(key), std::move(ca), std::move(deny_list)));
  security->site_id_ = signer.site_id();
  v1::SignedKey& own = security->own_key_;
  own.set_site_id(signed_key.site_id);
  own.set_epoch(signed_key.epoch);
  own.set_public_key(signed_key.public_key);
  own.set_signature(signed_key.signature);
  own.set_certificate_pem(signed_key.certificate_pem);
  return security;
}

absl::StatusOr<LinkSecurity::LinkCrypto> LinkSecurity::Derive(const std::string& neighbour_id,
                                                              const v1::SignedKey& neighbour,
                                                              uint64_t rotate_bytes,
                                                              uint32_t generation,
                                                              absl::string_view purpose) const {
  const crypto::SignedKey peer_key = FromProto(neighbour);
  STRAIT_RETURN_IF_ERROR(
      crypto::VerifySignedKey(federation_, neighbour_id, peer_key, ca_, deny_list_));
  STRAIT_ASSIGN_OR_RETURN(crypto::LinkEnd peer, crypto::LinkEndOf(peer_key));
  crypto::LinkEnd self{site_id_, epoch_, key_.public_key()};
  STRAIT_ASSIGN_OR_RETURN(crypto::LinkKeys keys, crypto::DeriveLinkKeys(federation_, self, key_,
                                                                        peer, generation, purpose));
  LinkCrypto link;
  link.key_epoch = keys.send.key_epoch;
  STRAIT_ASSIGN_OR_RETURN(link.sealer, crypto::Sealer::Create(keys.send, rotate_bytes));
  STRAIT_ASSIGN_OR_RETURN(link.opener, crypto::Opener::Create(keys.receive));
  return link;
}

absl::StatusOr<crypto::LinkEnd> LinkSecurity::VerifiedEnd(const std::string& id,
                                                          const v1::SignedKey& key) const {
  const crypto::SignedKey peer_key = FromProto(key);
  STRAIT_RETURN_IF_ERROR(crypto::VerifySignedKey(federation_, id, peer_key, ca_, deny_list_));
  return crypto::LinkEndOf(peer_key);
}

absl::Status LinkSecurity::AddMasks(absl::string_view round, std::span<const crypto::LinkEnd> peers,
                                    std::span<uint32_t> words) const {
  const crypto::LinkEnd self{site_id_, epoch_, key_.public_key()};
  return crypto::AddPairwiseMasks(federation_, round, self, key_, peers, words);
}

}  // namespace strait::site
