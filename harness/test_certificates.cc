#include "harness/test_certificates.h"

#include <filesystem>
#include <fstream>

namespace strait::harness {

absl::StatusOr<crypto::TlsMaterial> TestCertificates::Site(const std::string& site) const {
  return crypto::LoadTlsMaterial(ca_file(), cert_file(site), key_file(site));
}

absl::StatusOr<crypto::TlsMaterial> TestCertificates::Gateway() const {
  return crypto::LoadTlsMaterial(ca_file(), cert_file("gateway"), key_file("gateway"));
}

absl::StatusOr<TestCertificates> MakeCertificates(const std::string& dir,
                                                  const std::vector<std::string>& sites,
                                                  const std::string& federation) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError("cannot create " + dir + ": " + error.message());
  TestCertificates made{.dir = dir};
  auto write = [&](const std::string& name, const crypto::CertifiedKey& key) {
    std::ofstream(made.cert_file(name)) << key.certificate_pem;
    std::ofstream(made.key_file(name)) << key.key_pem;
  };
  absl::StatusOr<crypto::CertifiedKey> ca = crypto::CreateCa(federation);
  if (!ca.ok()) return ca.status();
  made.ca = *std::move(ca);
  write("ca", made.ca);
  absl::StatusOr<crypto::CertifiedKey> gateway =
      crypto::IssueGatewayCertificate(made.ca, {"127.0.0.1"});
  if (!gateway.ok()) return gateway.status();
  write("gateway", *gateway);
  for (const std::string& site : sites) {
    absl::StatusOr<crypto::CertifiedKey> cert = crypto::IssueSiteCertificate(made.ca, site);
    if (!cert.ok()) return cert.status();
    write(site, *cert);
  }
  return made;
}

}  // namespace strait::harness
