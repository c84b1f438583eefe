#include "crypto/certificates.h"

#include <arpa/inet.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/status.h"
#include "crypto/pem.h"

namespace strait::crypto {
namespace {

using X509ExtensionPtr = std::unique_ptr<X509_EXTENSION, OpenSslDeleter<X509_EXTENSION_free>>;
using GeneralNamesPtr = std::unique_ptr<GENERAL_NAMES, OpenSslDeleter<GENERAL_NAMES_free>>;
using BignumPtr = std::unique_ptr<BIGNUM, OpenSslDeleter<BN_free>>;

// Clock skew tolerated between the machine issuing a certificate and those checking it.
constexpr absl::Duration kBackdate = absl::Minutes(1);

absl::StatusOr<EvpPkeyPtr> GenerateP256Key() {
  EvpPkeyPtr key(EVP_EC_gen("P-256"));
  STRAIT_OPENSSL_CHECK(key.get());
  return key;
}

// "AB:CD:..." from raw bytes.
std::string ColonHex(const unsigned char* data, size_t size) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < size; ++i) {
    if (i > 0) out += ':';
    out += kDigits[data[i] >> 4];
    out += kDigits[data[i] & 15];
  }
  return out;
}

std::string NameToString(const X509_NAME* name) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253) < 0) return "?";
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return size > 0 ? std::string(data, size) : "";
}

// The subject's common name, or empty.
std::string CommonName(X509* certificate) {
  char buffer[256];
  const int size = X509_NAME_get_text_by_NID(X509_get_subject_name(certificate), NID_commonName,
                                             buffer, sizeof(buffer));
  return size > 0 ? std::string(buffer, size) : "";
}

std::string SerialHex(X509* certificate) {
  const ASN1_INTEGER* serial = X509_get0_serialNumber(certificate);
  return ColonHex(serial->data, serial->length);
}

absl::Time ToTime(const ASN1_TIME* time) {
  struct tm tm {};
  if (ASN1_TIME_to_tm(time, &tm) != 1) return absl::InfinitePast();
  return absl::FromTM(tm, absl::UTCTimeZone());
}

// Subject alternative names as "DNS:x", "IP:a.b.c.d", "URI:u".
std::vector<std::string> AltNames(X509* certificate) {
  std::vector<std::string> out;
  GeneralNamesPtr names(static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(certificate, NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type == GEN_DNS || name->type == GEN_URI || name->type == GEN_EMAIL) {
      const ASN1_IA5STRING* s = name->d.ia5;
      const char* prefix = name->type == GEN_DNS   ? "DNS:"
                           : name->type == GEN_URI ? "URI:"
                                                   : "email:";
      out.push_back(absl::StrCat(prefix, absl::string_view(reinterpret_cast<const char*>(s->data),
                                                           static_cast<size_t>(s->length))));
    } else if (name->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* ip = name->d.ip;
      char text[INET6_ADDRSTRLEN] = "?";
      if (ip->length == 4 || ip->length == 16) {
        inet_ntop(ip->length == 4 ? AF_INET : AF_INET6, ip->data, text, sizeof(text));
      }
      out.push_back(absl::StrCat("IP:", text));
    }
  }
  return out;
}

absl::Status AddExtension(X509* certificate, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, certificate, nullptr, nullptr, 0);
  X509ExtensionPtr extension(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!extension) {
    return OpenSslError(absl::StrCat("X509V3_EXT_conf_nid(", OBJ_nid2sn(nid), ")"), __FILE__,
                        __LINE__);
  }
  STRAIT_OPENSSL_CHECK(X509_add_ext(certificate, extension.get(), -1));
  return absl::OkStatus();
}

struct CertificateSpec {
  std::string common_name;
  std::vector<std::pair<int, std::string>> extensions;  // (NID, OpenSSL config value)
};

// Builds a certificate for `key` described by `spec`, signed by `issuer_key`; `issuer` null means
// self-signed.
absl::StatusOr<std::string> BuildCertificate(const CertificateSpec& spec, EVP_PKEY* key,
                                             X509* issuer, EVP_PKEY* issuer_key,
                                             const CertificateOptions& options) {
  if (options.validity <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("certificate validity must be positive");
  }
  X509Ptr certificate(X509_new());
  STRAIT_OPENSSL_CHECK(certificate.get());
  X509* cert = certificate.get();
  STRAIT_OPENSSL_CHECK(X509_set_version(cert, X509_VERSION_3));

  // 127 random bits: positive, unique without a registry of issued serials.
  unsigned char serial[16];
  STRAIT_OPENSSL_CHECK(RAND_bytes(serial, sizeof(serial)));
  serial[0] = (serial[0] & 0x7f) | 0x40;
  BignumPtr bn(BN_bin2bn(serial, sizeof(serial), nullptr));
  STRAIT_OPENSSL_CHECK(bn.get());
  STRAIT_OPENSSL_CHECK(BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)));

  const absl::Time not_before =
      options.not_before == absl::InfinitePast() ? absl::Now() - kBackdate : options.not_before;
  const absl::Time not_after = not_before + options.validity;
  STRAIT_OPENSSL_CHECK(ASN1_TIME_set(X509_getm_notBefore(cert), absl::ToTimeT(not_before)));
  STRAIT_OPENSSL_CHECK(ASN1_TIME_set(X509_getm_notAfter(cert), absl::ToTimeT(not_after)));

  X509_NAME* name = X509_get_subject_name(cert);
  STRAIT_OPENSSL_CHECK(X509_NAME_add_entry_by_txt(
      name, "O", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>("strait"), -1, -1, 0));
  STRAIT_OPENSSL_CHECK(X509_NAME_add_entry_by_txt(
      name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(spec.common_name.c_str()),
      -1, -1, 0));
  STRAIT_OPENSSL_CHECK(X509_set_issuer_name(cert, issuer ? X509_get_subject_name(issuer) : name));
  STRAIT_OPENSSL_CHECK(X509_set_pubkey(cert, key));

  for (const auto& [nid, value] : spec.extensions) {
    STRAIT_RETURN_IF_ERROR(AddExtension(cert, issuer ? issuer : cert, nid, value));
  }
  STRAIT_OPENSSL_CHECK(X509_sign(cert, issuer_key, EVP_sha256()));
  return CertificateToPem(cert);
}

// Issues a leaf certificate under `ca`, with a new key.
absl::StatusOr<CertifiedKey> IssueLeaf(const CertifiedKey& ca, CertificateSpec spec,
                                       const CertificateOptions& options) {
  STRAIT_ASSIGN_OR_RETURN(X509Ptr ca_certificate, ParseCertificatePem(ca.certificate_pem));
  STRAIT_ASSIGN_OR_RETURN(EvpPkeyPtr ca_key, ParsePrivateKeyPem(ca.key_pem));
  if (X509_check_private_key(ca_certificate.get(), ca_key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("the CA key does not belong to the CA certificate");
  }
  STRAIT_ASSIGN_OR_RETURN(EvpPkeyPtr key, GenerateP256Key());
  spec.extensions.insert(spec.extensions.end(), {{NID_basic_constraints, "critical,CA:FALSE"},
                                                 {NID_key_usage, "critical,digitalSignature"},
                                                 {NID_subject_key_identifier, "hash"},
                                                 {NID_authority_key_identifier, "keyid:always"}});
  CertifiedKey out;
  STRAIT_ASSIGN_OR_RETURN(
      out.certificate_pem,
      BuildCertificate(spec, key.get(), ca_certificate.get(), ca_key.get(), options));
  STRAIT_ASSIGN_OR_RETURN(out.key_pem, PrivateKeyToPem(key.get()));
  return out;
}

bool IsIpAddress(const std::string& host) {
  ASN1_OCTET_STRING* ip = a2i_IPADDRESS(host.c_str());
  ASN1_OCTET_STRING_free(ip);
  return ip != nullptr;
}

// The site identity of a parsed certificate, or an error saying why there is none.
absl::StatusOr<std::string> SiteIdOf(X509* certificate) {
  std::string from_uri;
  for (const std::string& name : AltNames(certificate)) {
    absl::string_view value = name;
    if (absl::ConsumePrefix(&value, "URI:") && absl::ConsumePrefix(&value, kSiteUriPrefix)) {
      if (!from_uri.empty()) {
        return absl::UnauthenticatedError("certificate names more than one site");
      }
      from_uri = std::string(value);
    }
  }
  const std::string common_name = CommonName(certificate);
  if (from_uri.empty()) {
    return absl::UnauthenticatedError(absl::StrCat("certificate CN=", common_name,
                                                   " is not a site certificate (no URI SAN ",
                                                   kSiteUriPrefix, "<id>)"));
  }
  if (!IsValidSiteId(from_uri) || from_uri != common_name) {
    return absl::UnauthenticatedError(
        absl::StrCat("certificate has an invalid site identity (CN=", common_name, ", URI ",
                     kSiteUriPrefix, from_uri, ")"));
  }
  return from_uri;
}

}  // namespace

bool IsValidSiteId(absl::string_view id) {
  auto lower_or_digit = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (id.empty() || id.size() > 63 || !lower_or_digit(id[0])) return false;
  return std::all_of(id.begin(), id.end(),
                     [&](char c) { return lower_or_digit(c) || c == '.' || c == '_' || c == '-'; });
}

absl::StatusOr<CertifiedKey> CreateCa(absl::string_view federation,
                                      const CertificateOptions& options) {
  STRAIT_ASSIGN_OR_RETURN(EvpPkeyPtr key, GenerateP256Key());
  CertificateSpec spec;
  spec.common_name = absl::StrCat(federation, " federation CA");
  spec.extensions = {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                     {NID_key_usage, "critical,keyCertSign,cRLSign"},
                     {NID_subject_key_identifier, "hash"}};
  CertifiedKey out;
  STRAIT_ASSIGN_OR_RETURN(out.certificate_pem,
                          BuildCertificate(spec, key.get(), nullptr, key.get(), options));
  STRAIT_ASSIGN_OR_RETURN(out.key_pem, PrivateKeyToPem(key.get()));
  return out;
}

absl::StatusOr<CertifiedKey> IssueGatewayCertificate(const CertifiedKey& ca,
                                                     const std::vector<std::string>& hosts,
                                                     const CertificateOptions& options) {
  if (hosts.empty())
    return absl::InvalidArgumentError("a gateway certificate needs at least one host");
  std::vector<std::string> names;
  for (const std::string& host : hosts) {
    if (host.empty() || host.find_first_of(", \t") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("invalid gateway host '", host, "'"));
    }
    names.push_back(absl::StrCat(IsIpAddress(host) ? "IP:" : "DNS:", host));
  }
  CertificateSpec spec;
  spec.common_name = hosts.front();
  spec.extensions = {{NID_ext_key_usage, "serverAuth"},
                     {NID_subject_alt_name, absl::StrJoin(names, ",")}};
  return IssueLeaf(ca, std::move(spec), options);
}

absl::StatusOr<CertifiedKey> IssueSiteCertificate(const CertifiedKey& ca, absl::string_view site_id,
                                                  const CertificateOptions& options) {
  if (!IsValidSiteId(site_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid site id '", site_id,
                     "' (expected ^[a-z0-9][a-z0-9._-]{0,62}$ as in the job spec)"));
  }
  CertificateSpec spec;
  spec.common_name = std::string(site_id);
  spec.extensions = {{NID_ext_key_usage, "clientAuth"},
                     {NID_subject_alt_name, absl::StrCat("URI:", kSiteUriPrefix, site_id)}};
  return IssueLeaf(ca, std::move(spec), options);
}

absl::StatusOr<TlsMaterial> LoadTlsMaterial(const std::string& ca_path,
                                            const std::string& certificate_path,
                                            const std::string& key_path) {
  TlsMaterial material;
  STRAIT_ASSIGN_OR_RETURN(material.ca_pem, ReadPemFile(ca_path));
  STRAIT_ASSIGN_OR_RETURN(material.own.certificate_pem, ReadPemFile(certificate_path));
  STRAIT_ASSIGN_OR_RETURN(material.own.key_pem, ReadPemFile(key_path));
  auto named = [](const std::string& path, const absl::Status& status) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", status.message()));
  };
  if (auto ca = ParseCertificatePem(material.ca_pem); !ca.ok()) return named(ca_path, ca.status());
  auto certificate = ParseCertificatePem(material.own.certificate_pem);
  if (!certificate.ok()) return named(certificate_path, certificate.status());
  auto key = ParsePrivateKeyPem(material.own.key_pem);
  if (!key.ok()) return named(key_path, key.status());
  if (X509_check_private_key(certificate->get(), key->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat(key_path, " is not the private key of ", certificate_path));
  }
  return material;
}

absl::StatusOr<CertificateInfo> DescribeCertificate(absl::string_view pem) {
  STRAIT_ASSIGN_OR_RETURN(X509Ptr certificate, ParseCertificatePem(pem));
  X509* cert = certificate.get();
  CertificateInfo info;
  info.subject = NameToString(X509_get_subject_name(cert));
  info.issuer = NameToString(X509_get_issuer_name(cert));
  info.serial_hex = SerialHex(cert);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_size = 0;
  STRAIT_OPENSSL_CHECK(X509_digest(cert, EVP_sha256(), digest, &digest_size));
  info.sha256_fingerprint = ColonHex(digest, digest_size);
  info.subject_alt_names = AltNames(cert);
  const uint32_t eku = X509_get_extended_key_usage(cert);
  if (eku != UINT32_MAX) {
    if (eku & XKU_SSL_SERVER) info.extended_key_usage.push_back("serverAuth");
    if (eku & XKU_SSL_CLIENT) info.extended_key_usage.push_back("clientAuth");
  }
  info.not_before = ToTime(X509_get0_notBefore(cert));
  info.not_after = ToTime(X509_get0_notAfter(cert));
  info.is_ca = X509_check_ca(cert) != 0;
  absl::StatusOr<std::string> site_id = SiteIdOf(cert);
  if (site_id.ok()) info.site_id = *site_id;
  ERR_clear_error();
  return info;
}

absl::StatusOr<std::string> SiteIdOfCertificate(X509* certificate) { return SiteIdOf(certificate); }

absl::StatusOr<std::string> SiteIdOfCertificate(absl::string_view certificate_pem) {
  absl::StatusOr<X509Ptr> certificate = ParseCertificatePem(certificate_pem);
  if (!certificate.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("certificate: ", certificate.status().message()));
  }
  return SiteIdOf(certificate->get());
}

absl::StatusOr<CertificateVerifier> CertificateVerifier::Create(absl::string_view ca_pem) {
  absl::StatusOr<X509Ptr> ca = ParseCertificatePem(ca_pem);
  if (!ca.ok())
    return absl::InvalidArgumentError(absl::StrCat("CA certificate: ", ca.status().message()));
  X509StorePtr store(X509_STORE_new());
  STRAIT_OPENSSL_CHECK(store.get());
  STRAIT_OPENSSL_CHECK(X509_STORE_add_cert(store.get(), ca->get()));
  return CertificateVerifier(std::move(store));
}

absl::Status CertificateVerifier::Verify(X509* certificate, CertificateUse use,
                                         absl::Time now) const {
  X509StoreCtxPtr ctx(X509_STORE_CTX_new());
  STRAIT_OPENSSL_CHECK(ctx.get());
  STRAIT_OPENSSL_CHECK(X509_STORE_CTX_init(ctx.get(), store_.get(), certificate, nullptr));
  STRAIT_OPENSSL_CHECK(X509_STORE_CTX_set_purpose(ctx.get(), use == CertificateUse::kSiteClient
                                                                 ? X509_PURPOSE_SSL_CLIENT
                                                                 : X509_PURPOSE_SSL_SERVER));
  X509_STORE_CTX_set_time(ctx.get(), 0, absl::ToTimeT(now));
  if (X509_verify_cert(ctx.get()) == 1) return absl::OkStatus();
  const int error = X509_STORE_CTX_get_error(ctx.get());
  ERR_clear_error();
  std::string detail;
  if (error == X509_V_ERR_CERT_HAS_EXPIRED) {
    detail = absl::StrCat(" (not after ", absl::FormatTime(ToTime(X509_get0_notAfter(certificate))),
                          ")");
  } else if (error == X509_V_ERR_CERT_NOT_YET_VALID) {
    detail = absl::StrCat(" (not before ",
                          absl::FormatTime(ToTime(X509_get0_notBefore(certificate))), ")");
  }
  return absl::UnauthenticatedError(absl::StrCat(
      "certificate ", NameToString(X509_get_subject_name(certificate)), " (serial ",
      SerialHex(certificate), ") rejected: ", X509_verify_cert_error_string(error), detail));
}

absl::StatusOr<std::string> CertificateVerifier::VerifySite(X509* certificate,
                                                            const DenyList& deny_list,
                                                            absl::Time now) const {
  STRAIT_RETURN_IF_ERROR(Verify(certificate, CertificateUse::kSiteClient, now));
  STRAIT_ASSIGN_OR_RETURN(std::string site_id, SiteIdOf(certificate));
  const std::string serial = SerialHex(certificate);
  if (deny_list.IsRevoked(serial)) {
    return absl::PermissionDeniedError(absl::StrCat("certificate of site ", site_id, " (serial ",
                                                    serial, ") is revoked by the deny list"));
  }
  return site_id;
}

absl::StatusOr<std::string> CertificateVerifier::VerifySite(absl::string_view certificate_pem,
                                                            const DenyList& deny_list,
                                                            absl::Time now) const {
  absl::StatusOr<X509Ptr> certificate = ParseCertificatePem(certificate_pem);
  if (!certificate.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("certificate: ", certificate.status().message()));
  }
  return VerifySite(certificate->get(), deny_list, now);
}

absl::Status VerifyCertificate(absl::string_view ca_pem, absl::string_view certificate_pem,
                               CertificateUse use, absl::Time now) {
  STRAIT_ASSIGN_OR_RETURN(CertificateVerifier verifier, CertificateVerifier::Create(ca_pem));
  absl::StatusOr<X509Ptr> certificate = ParseCertificatePem(certificate_pem);
  if (!certificate.ok()) {
    return absl::UnauthenticatedError(
        absl::StrCat("certificate: ", certificate.status().message()));
  }
  return verifier.Verify(certificate->get(), use, now);
}

absl::StatusOr<std::string> VerifySiteCertificate(absl::string_view ca_pem,
                                                  absl::string_view certificate_pem,
                                                  const DenyList& deny_list, absl::Time now) {
  STRAIT_ASSIGN_OR_RETURN(CertificateVerifier verifier, CertificateVerifier::Create(ca_pem));
  return verifier.VerifySite(certificate_pem, deny_list, now);
}

}  // namespace strait::crypto
