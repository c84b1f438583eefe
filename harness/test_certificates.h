// Certificates for a federation on this machine (integration tests, benchmarks, `strait demo`): a
// federation CA, the gateway's server certificate for 127.0.0.1 and a client certificate per site,
// written into one folder under the job spec's default names (ca.pem, gateway.pem/.key,
// <site>.pem/.key), so that a job spec beside a certs/ folder needs no tls: block. Every gRPC
// connection to a gateway is mutual TLS (DESIGN.md §5); a test or benchmark loads a site's
// material here and makes its channel credentials with site::MakeSiteChannelCredentials.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "crypto/certificates.h"

namespace strait::harness {

// Where MakeCertificates wrote the files.
struct TestCertificates {
  std::string dir;
  crypto::CertifiedKey ca;  // The CA's certificate and key (to issue more).

  std::string ca_file() const { return dir + "/ca.pem"; }
  std::string cert_file(const std::string& name) const { return dir + "/" + name + ".pem"; }
  std::string key_file(const std::string& name) const { return dir + "/" + name + ".key"; }
  // Site `site`'s certificate and key with the CA (crypto::LoadTlsMaterial): what its channel
  // presents. An error names the file that is missing or unusable (e.g. a site not issued here).
  absl::StatusOr<crypto::TlsMaterial> Site(const std::string& site) const;
  // The gateway's certificate and key with the CA: what a gRPC server standing in for it serves.
  absl::StatusOr<crypto::TlsMaterial> Gateway() const;
};

// Writes a federation CA named `federation`, the gateway's certificate (127.0.0.1) and certificates
// for `sites` into `dir` (created if missing). Errors: the folder cannot be made, or OpenSSL's.
absl::StatusOr<TestCertificates> MakeCertificates(const std::string& dir,
                                                  const std::vector<std::string>& sites,
                                                  const std::string& federation = "test");

}  // namespace strait::harness
