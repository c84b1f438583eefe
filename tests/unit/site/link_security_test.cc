// Two neighbouring sites exchange signed ephemeral keys (as the gateway relays them) and derive the
// same link keys: what one seals the other opens. Keys from another CA, signed for another site or
// revoked are refused.
#include "site/exchange/link_security.h"

#include <gtest/gtest.h>

namespace strait::site {
namespace {

class LinkSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ca_ = *crypto::CreateCa("fed");
    a_ = *crypto::IssueSiteCertificate(ca_, "dc-a");
    b_ = *crypto::IssueSiteCertificate(ca_, "dc-b");
  }
  crypto::CertifiedKey ca_, a_, b_;
};

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST_F(LinkSecurityTest, NeighboursDeriveMatchingKeys) {
  auto a = *LinkSecurity::Create("fed", 3, a_, ca_.certificate_pem);
  auto b = *LinkSecurity::Create("fed", 5, b_, ca_.certificate_pem);
  EXPECT_EQ(a->own_key().site_id(), "dc-a");
  EXPECT_EQ(a->own_key().epoch(), 3u);
  auto at_a = a->Derive("dc-b", b->own_key(), 1 << 30);
  auto at_b = b->Derive("dc-a", a->own_key(), 1 << 30);
  ASSERT_TRUE(at_a.ok()) << at_a.status();
  ASSERT_TRUE(at_b.ok()) << at_b.status();
  EXPECT_EQ(at_a->key_epoch, 8u);
  const std::string aad = "key and header", message = "activations";
  auto sealed = *at_a->sealer->Seal(Bytes(aad), Bytes(message));
  auto opened = at_b->opener->Open({sealed.sequence, at_a->key_epoch, sealed.body.size()},
                                   Bytes(aad), sealed.body);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(std::string(opened->begin(), opened->end()), message);
  // The other direction has its own key: a's sealed frame does not open with a's own opener.
  EXPECT_FALSE(
      at_a->opener
          ->Open({sealed.sequence, at_a->key_epoch, sealed.body.size()}, Bytes(aad), sealed.body)
          .ok());
}

TEST_F(LinkSecurityTest, RefusesKeysNotFromTheNeighbour) {
  auto a = *LinkSecurity::Create("fed", 1, a_, ca_.certificate_pem);
  auto b = *LinkSecurity::Create("fed", 1, b_, ca_.certificate_pem);
  // A key that claims to be dc-c's (the gateway relaying the wrong site's key).
  EXPECT_FALSE(a->Derive("dc-c", b->own_key(), 1 << 30).ok());
  // A key from a site of another federation's CA.
  crypto::CertifiedKey other_ca = *crypto::CreateCa("other");
  auto mallory = *LinkSecurity::Create("fed", 1, *crypto::IssueSiteCertificate(other_ca, "dc-b"),
                                       other_ca.certificate_pem);
  EXPECT_FALSE(a->Derive("dc-b", mallory->own_key(), 1 << 30).ok());
  // A forged public key under b's signature.
  v1::SignedKey forged = b->own_key();
  forged.mutable_public_key()->at(0) ^= 1;
  EXPECT_FALSE(a->Derive("dc-b", forged, 1 << 30).ok());
  // Signed for another federation.
  auto elsewhere = *LinkSecurity::Create("other-fed", 1, b_, ca_.certificate_pem);
  EXPECT_FALSE(a->Derive("dc-b", elsewhere->own_key(), 1 << 30).ok());
}

TEST_F(LinkSecurityTest, RevokedNeighbourIsRefused) {
  crypto::CertificateInfo info = *crypto::DescribeCertificate(b_.certificate_pem);
  crypto::DenyList revoked = *crypto::DenyList::Parse(info.serial_hex + "\n", "deny");
  auto a = *LinkSecurity::Create("fed", 1, a_, ca_.certificate_pem, revoked);
  auto b = *LinkSecurity::Create("fed", 1, b_, ca_.certificate_pem);
  EXPECT_FALSE(a->Derive("dc-b", b->own_key(), 1 << 30).ok());
}

}  // namespace
}  // namespace strait::site
