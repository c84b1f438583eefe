#include "crypto/key_exchange.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/crypto/hex.h"
#include "tests/unit/crypto/test_pki.h"

namespace strait::crypto {
namespace {

using ::testing::HasSubstr;
using testing::Hex;
using testing::Pki;
using testing::ToHex;

// RFC 7748 §5.2: X25519(scalar, u) for the two single-step vectors.
TEST(X25519Test, Rfc7748Section5_2) {
  struct Vector {
    const char* scalar;
    const char* u;
    const char* out;
  };
  for (const Vector& v :
       {Vector{"a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4",
               "e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c",
               "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"},
        Vector{"4b66e9d4d1b4673c5ad22691957d6af5c11b6421e0ea01d42ca4169e7918ba0d",
               "e5210f12786811d3f4b7959d0538ae2c31dbe7106fc03c3efc4cd549c715a493",
               "95cbde9476e8907d7aade45cb4b873f88b595a68799fa152e6f8f7647aac7957"}}) {
    auto key = EphemeralKey::FromPrivateKey(Hex(v.scalar));
    ASSERT_TRUE(key.ok()) << key.status();
    auto out = key->SharedSecret(Hex(v.u));
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ(ToHex(*out), v.out);
  }
}

// RFC 7748 §6.1: Alice and Bob's key pairs and shared secret.
TEST(X25519Test, Rfc7748Section6_1) {
  auto alice = EphemeralKey::FromPrivateKey(
      Hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a"));
  auto bob = EphemeralKey::FromPrivateKey(
      Hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb"));
  ASSERT_TRUE(alice.ok() && bob.ok());
  EXPECT_EQ(ToHex(alice->public_key()),
            "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
  EXPECT_EQ(ToHex(bob->public_key()),
            "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
  const char kShared[] = "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742";
  EXPECT_EQ(ToHex(*alice->SharedSecret(bob->public_key())), kShared);
  EXPECT_EQ(ToHex(*bob->SharedSecret(alice->public_key())), kShared);
}

TEST(X25519Test, RejectsLowOrderAndMalformedPeerKeys) {
  auto key = EphemeralKey::Generate();
  ASSERT_TRUE(key.ok());
  EXPECT_FALSE(key->SharedSecret(std::vector<uint8_t>(32, 0)).ok());  // Order-1 point: zero secret.
  EXPECT_FALSE(key->SharedSecret(std::vector<uint8_t>(31, 9)).ok());
  EXPECT_FALSE(EphemeralKey::FromPrivateKey(std::vector<uint8_t>(16, 1)).ok());
}

TEST(SignedKeyMessageTest, CanonicalLengthPrefixedEncoding) {
  const std::vector<uint8_t> pub = {0xaa, 0xbb};
  // clang-format off
  EXPECT_EQ(ToHex(SignedKeyMessage("f", "ab", 7, pub)),
            "00000014" + ToHex(std::string("strait/v1 signed key")) +  // label
            "00000001" "66" +                                          // "f"
            "00000002" "6162" +                                        // "ab"
            "00000007" +                                               // epoch
            "00000002" "aabb");                                        // public key
  // clang-format on
  // Moving a byte between fields changes the message.
  EXPECT_NE(SignedKeyMessage("fa", "b", 7, pub), SignedKeyMessage("f", "ab", 7, pub));
}

class KeyExchangeTest : public ::testing::Test {
 protected:
  static SignedKey Sign(const EphemeralKey& key, const CertifiedKey& site, const char* id,
                        uint32_t epoch = 1, const char* federation = "test-fed") {
    auto signer = KeySigner::Create(site);
    EXPECT_TRUE(signer.ok()) << signer.status();
    if (!signer.ok()) return SignedKey{};
    EXPECT_EQ(signer->site_id(), id);
    auto signed_key = signer->Sign(federation, epoch, key);
    EXPECT_TRUE(signed_key.ok()) << signed_key.status();
    return signed_key.ok() ? *signed_key : SignedKey{};
  }
  static absl::Status Verify(const SignedKey& key, const char* expected = "east",
                             const DenyList& deny = DenyList()) {
    static const CertificateVerifier* ca =
        new CertificateVerifier(*CertificateVerifier::Create(Pki().ca.certificate_pem));
    return VerifySignedKey("test-fed", expected, key, *ca, deny);
  }

  EphemeralKey east_key_ = *EphemeralKey::Generate();
  EphemeralKey west_key_ = *EphemeralKey::Generate();
};

TEST_F(KeyExchangeTest, HonestExchangeGivesMatchingPerDirectionKeys) {
  const SignedKey east = Sign(east_key_, Pki().east, "east", 3);
  const SignedKey west = Sign(west_key_, Pki().west, "west", 5);
  ASSERT_TRUE(Verify(east, "east").ok()) << Verify(east, "east");
  ASSERT_TRUE(Verify(west, "west").ok()) << Verify(west, "west");

  auto east_keys = DeriveLinkKeys("test-fed", *LinkEndOf(east), east_key_, *LinkEndOf(west));
  auto west_keys = DeriveLinkKeys("test-fed", *LinkEndOf(west), west_key_, *LinkEndOf(east));
  ASSERT_TRUE(east_keys.ok() && west_keys.ok()) << east_keys.status() << west_keys.status();
  EXPECT_EQ(east_keys->send.key, west_keys->receive.key);
  EXPECT_EQ(east_keys->send.nonce_salt, west_keys->receive.nonce_salt);
  EXPECT_EQ(east_keys->receive.key, west_keys->send.key);
  EXPECT_NE(east_keys->send.key, east_keys->receive.key);  // Each direction its own key.
  EXPECT_EQ(east_keys->send.key_epoch, 8u);
  EXPECT_EQ(west_keys->send.key_epoch, 8u);

  // And they work: east seals, west opens.
  auto sealer = *Sealer::Create(east_keys->send, 1 << 20);
  auto opener = *Opener::Create(west_keys->receive);
  const std::string aad = "job/0/0/0/fwd";
  auto sealed = sealer->Seal(AsBytes(aad), AsBytes("activations"));
  ASSERT_TRUE(sealed.ok());
  auto opened = opener->Open({sealed->sequence, sealer->key_epoch(), sealed->body.size()},
                             AsBytes(aad), sealed->body);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(std::string(opened->begin(), opened->end()), "activations");
}

TEST_F(KeyExchangeTest, KeysBindFederationAndEpochs) {
  const LinkEnd east = *LinkEndOf(Sign(east_key_, Pki().east, "east", 1));
  const LinkEnd west = *LinkEndOf(Sign(west_key_, Pki().west, "west", 1));
  const auto base = *DeriveLinkKeys("test-fed", east, east_key_, west);
  const auto other_fed = *DeriveLinkKeys("other-fed", east, east_key_, west);
  LinkEnd west2 = west;
  west2.epoch = 2;
  const auto other_epoch = *DeriveLinkKeys("test-fed", east, east_key_, west2);
  EXPECT_NE(base.send.key, other_fed.send.key);
  EXPECT_NE(base.send.key, other_epoch.send.key);
  EXPECT_EQ(other_epoch.send.key_epoch, 3u);
  // Each rollback generation has keys of its own; both ends agree on them.
  const auto generation2 = *DeriveLinkKeys("test-fed", east, east_key_, west, 2);
  const auto generation2_west = *DeriveLinkKeys("test-fed", west, west_key_, east, 2);
  EXPECT_NE(base.send.key, generation2.send.key);
  EXPECT_NE(base.send.nonce_salt, generation2.send.nonce_salt);
  EXPECT_EQ(generation2.send.key, generation2_west.receive.key);
  EXPECT_EQ(generation2.send.key_epoch, base.send.key_epoch);
  EXPECT_FALSE(DeriveLinkKeys("test-fed", east, west_key_, west).ok());  // Not my key.
  EXPECT_FALSE(DeriveLinkKeys("test-fed", east, east_key_, east).ok());  // Same site.
}

TEST_F(KeyExchangeTest, RejectsSignatureOverOtherFields) {
  const SignedKey good = Sign(east_key_, Pki().east, "east", 1);
  SignedKey epoch = good;
  epoch.epoch = 2;
  SignedKey swapped = good;
  swapped.public_key =
      std::string(reinterpret_cast<const char*>(west_key_.public_key().data()), 32);
  SignedKey signature = good;
  signature.signature[10] ^= 1;
  for (const SignedKey* k : {&epoch, &swapped, &signature}) {
    const absl::Status status = Verify(*k);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(std::string(status.message()), HasSubstr("bad signature"));
  }
  // Another federation's signature does not verify here.
  const SignedKey other_fed = Sign(east_key_, Pki().east, "east", 1, "other-fed");
  EXPECT_THAT(std::string(Verify(other_fed).message()), HasSubstr("bad signature"));
  SignedKey short_key = good;
  short_key.public_key.resize(31);
  EXPECT_THAT(std::string(Verify(short_key).message()), HasSubstr("31 bytes"));
}

TEST_F(KeyExchangeTest, RejectsWrongIdentity) {
  const SignedKey west = Sign(west_key_, Pki().west, "west");
  EXPECT_THAT(std::string(Verify(west, "east").message()),
              HasSubstr("the certificate is site 'west'"));
  // West's certificate with a claim to be east.
  SignedKey claim = west;
  claim.site_id = "east";
  EXPECT_EQ(Verify(claim, "east").code(), absl::StatusCode::kUnauthenticated);
  // A signer needs a site certificate and its own key.
  CertifiedKey mixed{Pki().east.certificate_pem, Pki().west.key_pem};
  EXPECT_THAT(std::string(KeySigner::Create(mixed).status().message()),
              HasSubstr("does not belong"));
  EXPECT_EQ(KeySigner::Create(Pki().gateway).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(KeyExchangeTest, RejectsBadCertificates) {
  struct Case {
    const CertifiedKey* cert;
    const char* reason;
  };
  for (const Case& c : {Case{&Pki().east_other_ca, "unable to get local issuer certificate"},
                        Case{&Pki().east_expired, "certificate has expired"},
                        Case{&Pki().east_not_yet, "certificate is not yet valid"}}) {
    const absl::Status status = Verify(Sign(east_key_, *c.cert, "east"));
    EXPECT_EQ(status.code(), absl::StatusCode::kUnauthenticated) << c.reason;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.reason));
  }
  const DenyList deny =
      *DenyList::Parse(DescribeCertificate(Pki().east.certificate_pem)->serial_hex, "d");
  const absl::Status revoked = Verify(Sign(east_key_, Pki().east, "east"), "east", deny);
  EXPECT_EQ(revoked.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(revoked.message()), HasSubstr("revoked"));
}

}  // namespace
}  // namespace strait::crypto
