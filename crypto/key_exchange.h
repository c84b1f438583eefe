// Authenticated key exchange between neighbouring sites (DESIGN.md §5, docs/security.md):
//
//   1. At join a site makes an EphemeralKey and signs (federation, site id, epoch, public key) with
//      its certificate key: KeySigner::Sign. The gateway relays the SignedKey (proto
//      strait.v1.SignedKey; callers copy the fields, crypto does not depend on proto).
//   2. A neighbour checks it with VerifySignedKey: certificate chain against the federation CA,
//      validity, deny list, identity = expected site id, and the signature.
//   3. Both derive one key per direction with DeriveLinkKeys (X25519, then HKDF-SHA256 whose info
//      binds federation, both ids, epochs and public keys, sender first).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "crypto/aead.h"
#include "crypto/certificates.h"
#include "crypto/deny_list.h"
#include "crypto/openssl_check.h"

namespace strait::crypto {

inline constexpr size_t kX25519KeySize = 32;

// An X25519 key pair. Movable, not copyable; the private key stays inside OpenSSL and is freed
// (wiped) with the object. Const methods are thread-safe.
class EphemeralKey {
 public:
  // A fresh key pair from OpenSSL's CSPRNG.
  static absl::StatusOr<EphemeralKey> Generate();
  // The key pair with this private key (RFC 7748 clamping applies); for known-answer tests.
  static absl::StatusOr<EphemeralKey> FromPrivateKey(std::span<const uint8_t> private_key);

  const std::array<uint8_t, kX25519KeySize>& public_key() const { return public_key_; }

  // X25519(private key, peer_public_key). Fails on a malformed peer key and on an all-zero result
  // (a low-order peer point), so a peer cannot force a known secret. The caller wipes the result.
  absl::StatusOr<std::array<uint8_t, kX25519KeySize>> SharedSecret(
      std::span<const uint8_t> peer_public_key) const;

 private:
  explicit EphemeralKey(EvpPkeyPtr key);
  EvpPkeyPtr key_;
  std::array<uint8_t, kX25519KeySize> public_key_{};
};

// Mirrors proto strait.v1.SignedKey.
struct SignedKey {
  std::string site_id;
  uint32_t epoch = 0;
  std::string public_key;  // Raw X25519 public key, 32 bytes.
  std::string signature;   // ECDSA P-256 / SHA-256 over SignedKeyMessage(...), DER.
  std::string certificate_pem;
};

// The canonical bytes that are signed: the label "strait/v1 signed key", then each of federation,
// site id, public key as a 32-bit big-endian length and the bytes, and epoch as 32-bit big endian,
// in the order (label, federation, site id, epoch, public key). Length prefixes make it
// unambiguous.
std::string SignedKeyMessage(absl::string_view federation, absl::string_view site_id,
                             uint32_t epoch, std::span<const uint8_t> public_key);

// A site's signing identity: its certificate and key, parsed and checked once (the key belongs to
// the certificate, which carries a valid site identity). Immutable and thread-safe; movable.
class KeySigner {
 public:
  static absl::StatusOr<KeySigner> Create(const CertifiedKey& site);

  const std::string& site_id() const { return site_id_; }

  // Signs `key`'s public key for (federation, site_id(), epoch).
  absl::StatusOr<SignedKey> Sign(absl::string_view federation, uint32_t epoch,
                                 const EphemeralKey& key) const;

 private:
  KeySigner(std::string site_id, std::string certificate_pem, EvpPkeyPtr key);
  std::string site_id_;
  std::string certificate_pem_;
  EvpPkeyPtr key_;
};

// Verifies a neighbour's SignedKey: ca.VerifySite(certificate, deny_list, now) (chain, validity,
// usage, identity, revocation), the certificate's identity equals both `expected_site_id` and
// signed_key.site_id, the public key is 32 bytes, and the signature is valid for (federation, site
// id, epoch, public key). kUnauthenticated or kPermissionDenied with the reason otherwise.
absl::Status VerifySignedKey(absl::string_view federation, absl::string_view expected_site_id,
                             const SignedKey& signed_key, const CertificateVerifier& ca,
                             const DenyList& deny_list, absl::Time now = absl::Now());

// The keys of one link as seen from one site.
struct LinkKeys {
  DirectionKey send;     // Seals what this site sends to the peer.
  DirectionKey receive;  // Opens what the peer sends to this site.
};

// One end of a link: who, which join epoch, and its ephemeral public key.
struct LinkEnd {
  std::string site_id;
  uint32_t epoch = 0;
  std::array<uint8_t, kX25519KeySize> public_key{};
};

// Derives both direction keys of the link between this site (`self`, whose private key is `mine`)
// and a peer whose SignedKey passed VerifySignedKey. For direction A->B:
//   okm = HKDF-SHA256(ikm = X25519 shared secret, salt = empty,
//                     info = "strait/v1 link key" || lp(federation) || lp(A.id) || be32(A.epoch)
//                            || lp(A.public_key) || lp(B.id) || be32(B.epoch) || lp(B.public_key)
//                            [|| be32(generation) when generation > 0]
//                            [|| lp(purpose) when purpose is not empty])
//   key = okm[0, 32), nonce salt = okm[32, 36), key_epoch = A.epoch + B.epoch
// (lp = 32-bit big-endian length then bytes). key_epoch grows whenever either end rejoins.
// `generation` is the federation's rollback generation (DESIGN.md §7): after a rollback the sealers
// start their counters again, so each generation must have keys of its own (no nonce is ever reused
// under one key, even between neighbours that both kept their epoch). `purpose` names keys of
// another use between the same two ends ("move": the MOVE frames of a re-plan), whose sealers
// count from 0 too.
absl::StatusOr<LinkKeys> DeriveLinkKeys(absl::string_view federation, const LinkEnd& self,
                                        const EphemeralKey& mine, const LinkEnd& peer,
                                        uint32_t generation = 0, absl::string_view purpose = {});

// Convenience: the LinkEnd described by a verified SignedKey (kInvalidArgument on a bad key size).
absl::StatusOr<LinkEnd> LinkEndOf(const SignedKey& signed_key);

}  // namespace strait::crypto
