// Certificate and signed-key checks on arbitrary bytes: a neighbour's SignedKey (certificate PEM,
// public key, signature) arrives through the gateway. Must never crash; must never accept.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "crypto/certificates.h"
#include "crypto/deny_list.h"
#include "crypto/key_exchange.h"

using namespace strait::crypto;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const CertifiedKey* ca = new CertifiedKey(*CreateCa("fuzz"));
  static const CertificateVerifier* verifier =
      new CertificateVerifier(*CertificateVerifier::Create(ca->certificate_pem));
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)DescribeCertificate(text);
  (void)SiteIdOfCertificate(text);
  (void)DenyList::Parse(text, "fuzz");
  // Split the input into the fields of a SignedKey.
  SignedKey key;
  const size_t a = size / 4, b = size / 2;
  key.site_id = text.substr(0, a);
  key.public_key = text.substr(a, b - a);
  key.signature = text.substr(b, b / 2);
  key.certificate_pem = text.substr(b + b / 2);
  if (VerifySignedKey("fuzz", key.site_id, key, *verifier, DenyList()).ok()) abort();
  return 0;
}
