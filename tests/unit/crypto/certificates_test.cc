#include "crypto/certificates.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "crypto/pem.h"
#include "tests/unit/crypto/test_pki.h"

namespace strait::crypto {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::Pki;

TEST(CertificatesTest, CaDescription) {
  auto info = DescribeCertificate(Pki().ca.certificate_pem);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->subject, "CN=test-fed federation CA,O=strait");
  EXPECT_EQ(info->issuer, info->subject);
  EXPECT_TRUE(info->is_ca);
  EXPECT_TRUE(info->site_id.empty());
  // Default validity: one year from (a minute before) now.
  EXPECT_NEAR(absl::ToDoubleHours(info->not_after - info->not_before), 24 * 365, 1e-6);
  EXPECT_LT(info->not_before, absl::Now());
  EXPECT_EQ(info->serial_hex.size(), 16 * 3 - 1);
  EXPECT_EQ(info->sha256_fingerprint.size(), 32 * 3 - 1);
}

TEST(CertificatesTest, GatewayHasHostsAsSans) {
  auto info = DescribeCertificate(Pki().gateway.certificate_pem);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_THAT(info->subject_alt_names, ElementsAre("DNS:localhost", "IP:127.0.0.1"));
  EXPECT_THAT(info->extended_key_usage, ElementsAre("serverAuth"));
  EXPECT_EQ(info->issuer, "CN=test-fed federation CA,O=strait");
  EXPECT_FALSE(info->is_ca);
  EXPECT_TRUE(VerifyCertificate(Pki().ca.certificate_pem, Pki().gateway.certificate_pem,
                                CertificateUse::kGatewayServer)
                  .ok());
}

TEST(CertificatesTest, SiteIdentity) {
  auto info = DescribeCertificate(Pki().east.certificate_pem);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->subject, "CN=east,O=strait");
  EXPECT_THAT(info->subject_alt_names, ElementsAre("URI:strait://site/east"));
  EXPECT_THAT(info->extended_key_usage, ElementsAre("clientAuth"));
  EXPECT_EQ(info->site_id, "east");
  auto id = VerifySiteCertificate(Pki().ca.certificate_pem, Pki().east.certificate_pem, DenyList());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "east");
}

TEST(CertificatesTest, RejectsAnotherCa) {
  auto id = VerifySiteCertificate(Pki().ca.certificate_pem, Pki().east_other_ca.certificate_pem,
                                  DenyList());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(id.status().message()),
              HasSubstr("unable to get local issuer certificate"));
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("CN=east"));
}

TEST(CertificatesTest, RejectsExpiredAndNotYetValid) {
  auto expired = VerifySiteCertificate(Pki().ca.certificate_pem, Pki().east_expired.certificate_pem,
                                       DenyList());
  EXPECT_EQ(expired.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(expired.status().message()),
              HasSubstr("certificate has expired (not after"));
  auto future = VerifySiteCertificate(Pki().ca.certificate_pem, Pki().east_not_yet.certificate_pem,
                                      DenyList());
  EXPECT_EQ(future.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(future.status().message()),
              HasSubstr("certificate is not yet valid (not before"));
  // The same certificate is fine at a time inside its validity.
  EXPECT_TRUE(VerifySiteCertificate(Pki().ca.certificate_pem, Pki().east_not_yet.certificate_pem,
                                    DenyList(), absl::Now() + absl::Hours(36))
                  .ok());
}

TEST(CertificatesTest, RejectsWrongUse) {
  // A gateway certificate is no site certificate, and a site certificate cannot serve.
  auto gateway_as_site =
      VerifySiteCertificate(Pki().ca.certificate_pem, Pki().gateway.certificate_pem, DenyList());
  EXPECT_EQ(gateway_as_site.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(std::string(gateway_as_site.status().message()),
              HasSubstr("unsuitable certificate purpose"));
  EXPECT_FALSE(VerifyCertificate(Pki().ca.certificate_pem, Pki().east.certificate_pem,
                                 CertificateUse::kGatewayServer)
                   .ok());
  EXPECT_EQ(SiteIdOfCertificate(Pki().gateway.certificate_pem).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST(CertificatesTest, RejectsRevoked) {
  auto info = DescribeCertificate(Pki().east.certificate_pem);
  auto deny = DenyList::Parse(info->serial_hex, "deny");
  ASSERT_TRUE(deny.ok());
  auto id = VerifySiteCertificate(Pki().ca.certificate_pem, Pki().east.certificate_pem, *deny);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("site east"));
  EXPECT_THAT(std::string(id.status().message()), HasSubstr("revoked"));
  // West is unaffected.
  EXPECT_TRUE(
      VerifySiteCertificate(Pki().ca.certificate_pem, Pki().west.certificate_pem, *deny).ok());
}

TEST(CertificatesTest, RejectsBadInput) {
  EXPECT_FALSE(IssueSiteCertificate(Pki().ca, "East").ok());
  EXPECT_FALSE(IssueSiteCertificate(Pki().ca, "").ok());
  EXPECT_FALSE(IssueSiteCertificate(Pki().ca, "a/b").ok());
  EXPECT_FALSE(IssueGatewayCertificate(Pki().ca, {}).ok());
  EXPECT_FALSE(IssueGatewayCertificate(Pki().ca, {"a,DNS:evil"}).ok());
  EXPECT_FALSE(IssueSiteCertificate(Pki().ca, "x", {.validity = absl::ZeroDuration()}).ok());
  // A CA key that does not match the CA certificate.
  CertifiedKey mixed{Pki().ca.certificate_pem, Pki().other_ca.key_pem};
  EXPECT_FALSE(IssueSiteCertificate(mixed, "east").ok());
  EXPECT_EQ(DescribeCertificate("garbage").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(SiteIdOfCertificate("").ok());
}

TEST(CertificatesTest, ErrorsNeverQuoteKeys) {
  // A corrupted key: the error must not echo any of its text.
  std::string key = Pki().east.key_pem;
  key[40] = '!';
  auto parsed = ParsePrivateKeyPem(key);
  ASSERT_FALSE(parsed.ok());
  const std::string body = key.substr(28, 40);  // Base64 from inside the PEM.
  EXPECT_THAT(std::string(parsed.status().message()), Not(HasSubstr(body)));
  CertifiedKey bad_ca{Pki().ca.certificate_pem, key};
  auto issued = IssueSiteCertificate(bad_ca, "east");
  ASSERT_FALSE(issued.ok());
  EXPECT_THAT(std::string(issued.status().message()), Not(HasSubstr(body)));
}

TEST(PemFileTest, KeysAreWrittenPrivateAndNeverOverwritten) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("strait_pem_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "ca.key").string();
  ASSERT_TRUE(WritePemFile(path, "secret", 0600, /*overwrite=*/false).ok());
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const absl::Status again = WritePemFile(path, "other", 0600, /*overwrite=*/false);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(again.message()), HasSubstr("--force"));
  EXPECT_EQ(*ReadPemFile(path), "secret");
  ASSERT_TRUE(WritePemFile(path, "other", 0600, /*overwrite=*/true).ok());
  EXPECT_EQ(*ReadPemFile(path), "other");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);  // No temp files left.
  EXPECT_EQ(ReadPemFile((dir / "missing").string()).status().code(), absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strait::crypto

namespace strait::crypto {
namespace {

TEST(LoadTlsMaterialTest, LoadsMatchingFilesAndNamesFilesInErrors) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("strait_tls_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto path = [&](const char* name) { return (dir / name).string(); };
  ASSERT_TRUE(WritePemFile(path("ca.pem"), Pki().ca.certificate_pem, 0644, true).ok());
  ASSERT_TRUE(WritePemFile(path("east.pem"), Pki().east.certificate_pem, 0644, true).ok());
  ASSERT_TRUE(WritePemFile(path("east.key"), Pki().east.key_pem, 0600, true).ok());
  ASSERT_TRUE(WritePemFile(path("west.key"), Pki().west.key_pem, 0600, true).ok());

  auto material = LoadTlsMaterial(path("ca.pem"), path("east.pem"), path("east.key"));
  ASSERT_TRUE(material.ok()) << material.status();
  EXPECT_EQ(material->ca_pem, Pki().ca.certificate_pem);
  EXPECT_EQ(material->own.key_pem, Pki().east.key_pem);

  auto mismatch = LoadTlsMaterial(path("ca.pem"), path("east.pem"), path("west.key"));
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(mismatch.status().message()),
              HasSubstr("west.key is not the private key"));
  EXPECT_THAT(std::string(mismatch.status().message()), Not(HasSubstr("PRIVATE KEY-----")));

  auto swapped = LoadTlsMaterial(path("ca.pem"), path("east.key"), path("east.pem"));
  EXPECT_THAT(std::string(swapped.status().message()), HasSubstr("east.key: no PEM certificate"));
  EXPECT_EQ(LoadTlsMaterial(path("none.pem"), path("east.pem"), path("east.key")).status().code(),
            absl::StatusCode::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strait::crypto
