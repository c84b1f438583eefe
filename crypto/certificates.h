// The federation's X.509 material (DESIGN.md §5): one CA per federation, a server certificate for
// the gateway and a client certificate per site, all ECDSA P-256 with SHA-256 signatures.
//
// Identity: a site certificate names its site twice, as subject CN = <site id> and as the URI
// subject alternative name strait://site/<site id>; both must agree. Site certificates carry
// extendedKeyUsage clientAuth only and the gateway's serverAuth only, so neither can stand in for
// the other. See docs/security.md.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "crypto/deny_list.h"
#include "crypto/openssl_check.h"

namespace strait::crypto {

// A certificate and its private key, both PEM. The key is secret: never log or print key_pem.
struct CertifiedKey {
  std::string certificate_pem;
  std::string key_pem;  // PKCS#8, unencrypted; store it with mode 0600 (WritePemFile).
};

struct CertificateOptions {
  absl::Time not_before =
      absl::InfinitePast();  // InfinitePast: now (minus a minute of clock skew).
  absl::Duration validity = absl::Hours(24 * 365);
};

// The prefix of a site certificate's URI SAN: strait://site/<site id>.
inline constexpr absl::string_view kSiteUriPrefix = "strait://site/";

// Whether `id` is a valid site id: ^[a-z0-9][a-z0-9._-]{0,62}$ (the job spec's rule).
bool IsValidSiteId(absl::string_view id);

// A self-signed CA certificate "<federation> federation CA" (CA:TRUE, pathlen 0, keyCertSign) and
// its new key.
absl::StatusOr<CertifiedKey> CreateCa(absl::string_view federation,
                                      const CertificateOptions& options = {});

// A gateway server certificate signed by `ca` whose subject alternative names are `hosts` (an IP
// address becomes an IP SAN, anything else a DNS SAN). At least one host.
absl::StatusOr<CertifiedKey> IssueGatewayCertificate(const CertifiedKey& ca,
                                                     const std::vector<std::string>& hosts,
                                                     const CertificateOptions& options = {});

// A site client certificate signed by `ca` whose identity is `site_id` (see above).
absl::StatusOr<CertifiedKey> IssueSiteCertificate(const CertifiedKey& ca, absl::string_view site_id,
                                                  const CertificateOptions& options = {});

// What a TLS endpoint loads: the federation CA and its own certificate and key.
struct TlsMaterial {
  std::string ca_pem;
  CertifiedKey own;
};

// Reads the three PEM files (ReadPemFile) and checks that they parse and that the key belongs to
// the certificate, so that a misconfiguration fails here with the file names rather than deep in
// gRPC. Error messages name files, never their contents.
absl::StatusOr<TlsMaterial> LoadTlsMaterial(const std::string& ca_path,
                                            const std::string& certificate_path,
                                            const std::string& key_path);

// What `strait certs show` prints.
struct CertificateInfo {
  std::string subject;  // RFC 2253, e.g. "CN=east,O=strait".
  std::string issuer;
  std::string serial_hex;                       // Upper-case hex with colons, e.g. "3F:A2:...".
  std::string sha256_fingerprint;               // Upper-case hex with colons.
  std::vector<std::string> subject_alt_names;   // "DNS:x", "IP:1.2.3.4", "URI:strait://site/east".
  std::vector<std::string> extended_key_usage;  // "serverAuth", "clientAuth".
  absl::Time not_before;
  absl::Time not_after;
  bool is_ca = false;
  std::string site_id;  // The site identity when it is a valid site certificate's, else empty.
};

// Parses one PEM certificate (the first in `pem`).
absl::StatusOr<CertificateInfo> DescribeCertificate(absl::string_view pem);

// Which use a certificate is verified for (checks extendedKeyUsage).
enum class CertificateUse { kSiteClient, kGatewayServer };

// The site id of a site certificate (CN and URI SAN agree and are a valid site id); does not verify
// the chain. kUnauthenticated when the certificate carries no valid site identity.
absl::StatusOr<std::string> SiteIdOfCertificate(X509* certificate);
absl::StatusOr<std::string> SiteIdOfCertificate(absl::string_view certificate_pem);

// The federation CA, parsed once, and the checks made against it. Immutable and thread-safe; cheap
// to move. Errors are kUnauthenticated with a message naming the certificate's subject and serial
// and the reason (e.g. "certificate has expired"), or kPermissionDenied when it is revoked.
class CertificateVerifier {
 public:
  static absl::StatusOr<CertificateVerifier> Create(absl::string_view ca_pem);

  // Signature chain to the CA, validity period at `now`, key usage for `use`.
  absl::Status Verify(X509* certificate, CertificateUse use, absl::Time now) const;

  // Everything a neighbour or the gateway checks about a site's certificate: Verify for
  // kSiteClient, the site identity, and the deny list. Returns the site id.
  absl::StatusOr<std::string> VerifySite(X509* certificate, const DenyList& deny_list,
                                         absl::Time now) const;
  absl::StatusOr<std::string> VerifySite(absl::string_view certificate_pem,
                                         const DenyList& deny_list,
                                         absl::Time now = absl::Now()) const;

 private:
  explicit CertificateVerifier(X509StorePtr store) : store_(std::move(store)) {}
  X509StorePtr store_;  // Holds the CA; read-only after Create.
};

// One-shot conveniences that parse the CA each time (CertificateVerifier::Create + Verify...).
absl::Status VerifyCertificate(absl::string_view ca_pem, absl::string_view certificate_pem,
                               CertificateUse use, absl::Time now = absl::Now());
absl::StatusOr<std::string> VerifySiteCertificate(absl::string_view ca_pem,
                                                  absl::string_view certificate_pem,
                                                  const DenyList& deny_list,
                                                  absl::Time now = absl::Now());

}  // namespace strait::crypto
