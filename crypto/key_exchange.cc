#include "crypto/key_exchange.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "crypto/hkdf.h"
#include "crypto/length_prefixed.h"
#include "crypto/pem.h"

namespace strait::crypto {
namespace {

constexpr absl::string_view kSignedKeyLabel = "strait/v1 signed key";
constexpr absl::string_view kLinkKeyLabel = "strait/v1 link key";

// Writes direction sender->receiver's key into *key.
absl::Status DeriveDirection(absl::string_view federation, const LinkEnd& sender,
                             const LinkEnd& receiver, uint32_t generation,
                             absl::string_view purpose, std::span<const uint8_t> shared_secret,
                             DirectionKey* key) {
  std::string info(kLinkKeyLabel);
  AppendField(&info, federation);
  for (const LinkEnd* end : {&sender, &receiver}) {
    AppendField(&info, end->site_id);
    AppendU32(&info, end->epoch);
    AppendField(&info, AsString(end->public_key));
  }
  if (generation > 0) AppendU32(&info, generation);
  if (!purpose.empty()) AppendField(&info, purpose);
  STRAIT_ASSIGN_OR_RETURN(std::vector<uint8_t> okm, HkdfSha256(shared_secret, {}, AsBytes(info),
                                                               kAeadKeySize + kNonceSaltSize));
  std::memcpy(key->key.data(), okm.data(), kAeadKeySize);
  std::memcpy(key->nonce_salt.data(), okm.data() + kAeadKeySize, kNonceSaltSize);
  key->key_epoch = sender.epoch + receiver.epoch;
  OPENSSL_cleanse(okm.data(), okm.size());
  return absl::OkStatus();
}

}  // namespace

// ---- EphemeralKey ----

EphemeralKey::EphemeralKey(EvpPkeyPtr key) : key_(std::move(key)) {}

absl::StatusOr<EphemeralKey> EphemeralKey::Generate() {
  EvpPkeyPtr key(EVP_PKEY_Q_keygen(nullptr, nullptr, "X25519"));
  STRAIT_OPENSSL_CHECK(key.get());
  EphemeralKey out(std::move(key));
  size_t size = kX25519KeySize;
  STRAIT_OPENSSL_CHECK(EVP_PKEY_get_raw_public_key(out.key_.get(), out.public_key_.data(), &size));
  return out;
}

absl::StatusOr<EphemeralKey> EphemeralKey::FromPrivateKey(std::span<const uint8_t> private_key) {
  if (private_key.size() != kX25519KeySize) {
    return absl::InvalidArgumentError("an X25519 private key is 32 bytes");
  }
  EvpPkeyPtr key(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, private_key.data(),
                                              private_key.size()));
  STRAIT_OPENSSL_CHECK(key.get());
  EphemeralKey out(std::move(key));
  size_t size = kX25519KeySize;
  STRAIT_OPENSSL_CHECK(EVP_PKEY_get_raw_public_key(out.key_.get(), out.public_key_.data(), &size));
  return out;
}

absl::StatusOr<std::array<uint8_t, kX25519KeySize>> EphemeralKey::SharedSecret(
    std::span<const uint8_t> peer_public_key) const {
  if (peer_public_key.size() != kX25519KeySize) {
    return absl::InvalidArgumentError(
        absl::StrCat("an X25519 public key is 32 bytes, not ", peer_public_key.size()));
  }
  EvpPkeyPtr peer(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer_public_key.data(),
                                              peer_public_key.size()));
  STRAIT_OPENSSL_CHECK(peer.get());
  EvpPkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, key_.get(), nullptr));
  STRAIT_OPENSSL_CHECK(ctx.get());
  STRAIT_OPENSSL_CHECK(EVP_PKEY_derive_init(ctx.get()));
  STRAIT_OPENSSL_CHECK(EVP_PKEY_derive_set_peer(ctx.get(), peer.get()));
  std::array<uint8_t, kX25519KeySize> secret{};
  size_t size = secret.size();
  // OpenSSL refuses an all-zero X25519 result (RFC 7748 §6.1's check) with an error here.
  STRAIT_OPENSSL_CHECK(EVP_PKEY_derive(ctx.get(), secret.data(), &size));
  return secret;
}

// ---- Signing ----

std::string SignedKeyMessage(absl::string_view federation, absl::string_view site_id,
                             uint32_t epoch, std::span<const uint8_t> public_key) {
  std::string message;
  AppendField(&message, kSignedKeyLabel);
  AppendField(&message, federation);
  AppendField(&message, site_id);
  AppendU32(&message, epoch);
  AppendField(&message, AsString(public_key));
  return message;
}

KeySigner::KeySigner(std::string site_id, std::string certificate_pem, EvpPkeyPtr key)
    : site_id_(std::move(site_id)),
      certificate_pem_(std::move(certificate_pem)),
      key_(std::move(key)) {}

absl::StatusOr<KeySigner> KeySigner::Create(const CertifiedKey& site) {
  STRAIT_ASSIGN_OR_RETURN(X509Ptr certificate, ParseCertificatePem(site.certificate_pem));
  STRAIT_ASSIGN_OR_RETURN(std::string site_id, SiteIdOfCertificate(certificate.get()));
  STRAIT_ASSIGN_OR_RETURN(EvpPkeyPtr key, ParsePrivateKeyPem(site.key_pem));
  if (X509_check_private_key(certificate.get(), key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("the private key does not belong to site ", site_id, "'s certificate"));
  }
  return KeySigner(std::move(site_id), site.certificate_pem, std::move(key));
}

absl::StatusOr<SignedKey> KeySigner::Sign(absl::string_view federation, uint32_t epoch,
                                          const EphemeralKey& key) const {
  const std::string message = SignedKeyMessage(federation, site_id_, epoch, key.public_key());
  EvpMdCtxPtr ctx(EVP_MD_CTX_new());
  STRAIT_OPENSSL_CHECK(ctx.get());
  STRAIT_OPENSSL_CHECK(EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key_.get()));
  size_t size = 0;
  const auto* data = reinterpret_cast<const unsigned char*>(message.data());
  STRAIT_OPENSSL_CHECK(EVP_DigestSign(ctx.get(), nullptr, &size, data, message.size()));
  SignedKey out;
  out.signature.resize(size);
  STRAIT_OPENSSL_CHECK(EVP_DigestSign(ctx.get(),
                                      reinterpret_cast<unsigned char*>(out.signature.data()), &size,
                                      data, message.size()));
  out.signature.resize(size);
  out.site_id = site_id_;
  out.epoch = epoch;
  out.public_key = std::string(AsString(key.public_key()));
  out.certificate_pem = certificate_pem_;
  return out;
}

absl::Status VerifySignedKey(absl::string_view federation, absl::string_view expected_site_id,
                             const SignedKey& signed_key, const CertificateVerifier& ca,
                             const DenyList& deny_list, absl::Time now) {
  absl::StatusOr<X509Ptr> certificate = ParseCertificatePem(signed_key.certificate_pem);
  if (!certificate.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("signed key of '", signed_key.site_id, "': ", certificate.status().message()));
  }
  STRAIT_ASSIGN_OR_RETURN(std::string identity, ca.VerifySite(certificate->get(), deny_list, now));
  if (identity != expected_site_id || identity != signed_key.site_id) {
    return absl::UnauthenticatedError(
        absl::StrCat("signed key: the certificate is site '", identity, "', the key claims '",
                     signed_key.site_id, "' and the neighbour should be '", expected_site_id, "'"));
  }
  if (signed_key.public_key.size() != kX25519KeySize) {
    return absl::UnauthenticatedError(
        absl::StrCat("signed key of site '", identity, "': public key of ",
                     signed_key.public_key.size(), " bytes, expected 32"));
  }
  EVP_PKEY* public_key = X509_get0_pubkey(certificate->get());
  STRAIT_OPENSSL_CHECK(public_key);
  const std::string message = SignedKeyMessage(federation, signed_key.site_id, signed_key.epoch,
                                               AsBytes(signed_key.public_key));
  EvpMdCtxPtr ctx(EVP_MD_CTX_new());
  STRAIT_OPENSSL_CHECK(ctx.get());
  STRAIT_OPENSSL_CHECK(EVP_DigestVerifyInit(ctx.get(), nullptr, EVP_sha256(), nullptr, public_key));
  const int verified = EVP_DigestVerify(
      ctx.get(), reinterpret_cast<const unsigned char*>(signed_key.signature.data()),
      signed_key.signature.size(), reinterpret_cast<const unsigned char*>(message.data()),
      message.size());
  ERR_clear_error();
  if (verified != 1) {
    return absl::UnauthenticatedError(absl::StrCat(
        "signed key of site '", identity, "' epoch ", signed_key.epoch,
        ": bad signature (not made by the certificate's key for federation '", federation, "')"));
  }
  return absl::OkStatus();
}

// ---- Derivation ----

absl::StatusOr<LinkEnd> LinkEndOf(const SignedKey& signed_key) {
  if (signed_key.public_key.size() != kX25519KeySize) {
    return absl::InvalidArgumentError("an X25519 public key is 32 bytes");
  }
  LinkEnd end;
  end.site_id = signed_key.site_id;
  end.epoch = signed_key.epoch;
  std::memcpy(end.public_key.data(), signed_key.public_key.data(), kX25519KeySize);
  return end;
}

absl::StatusOr<LinkKeys> DeriveLinkKeys(absl::string_view federation, const LinkEnd& self,
                                        const EphemeralKey& mine, const LinkEnd& peer,
                                        uint32_t generation, absl::string_view purpose) {
  if (self.site_id == peer.site_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("a link needs two sites; both are '", self.site_id, "'"));
  }
  if (self.public_key != mine.public_key()) {
    return absl::InvalidArgumentError("DeriveLinkKeys: self.public_key is not mine's public key");
  }
  STRAIT_ASSIGN_OR_RETURN(auto secret, mine.SharedSecret(peer.public_key));
  LinkKeys keys;
  absl::Status status =
      DeriveDirection(federation, self, peer, generation, purpose, secret, &keys.send);
  if (status.ok())
    status = DeriveDirection(federation, peer, self, generation, purpose, secret, &keys.receive);
  OPENSSL_cleanse(secret.data(), secret.size());
  STRAIT_RETURN_IF_ERROR(status);
  return keys;
}

}  // namespace strait::crypto
