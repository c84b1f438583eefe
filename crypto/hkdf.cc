#include "crypto/hkdf.h"

#include <openssl/core_names.h>
#include <openssl/kdf.h>
#include <openssl/params.h>

#include "absl/strings/str_cat.h"
#include "crypto/openssl_check.h"

namespace strait::crypto {
namespace {

using EvpKdfCtxPtr = std::unique_ptr<EVP_KDF_CTX, OpenSslDeleter<EVP_KDF_CTX_free>>;

// OSSL_PARAM wants non-const pointers even for inputs it only reads.
void* Mutable(std::span<const uint8_t> bytes) { return const_cast<uint8_t*>(bytes.data()); }

}  // namespace

absl::StatusOr<std::vector<uint8_t>> HkdfSha256(std::span<const uint8_t> ikm,
                                                std::span<const uint8_t> salt,
                                                std::span<const uint8_t> info, size_t length) {
  if (length == 0 || length > 255 * 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("HKDF-SHA256 cannot produce ", length, " bytes"));
  }
  // Fetched once: a provider lookup costs more than the derivation itself.
  static EVP_KDF* const kdf = EVP_KDF_fetch(nullptr, OSSL_KDF_NAME_HKDF, nullptr);
  STRAIT_OPENSSL_CHECK(kdf);
  EvpKdfCtxPtr ctx(EVP_KDF_CTX_new(kdf));
  STRAIT_OPENSSL_CHECK(ctx.get());
  char digest[] = "SHA256";
  OSSL_PARAM params[5];
  OSSL_PARAM* p = params;
  *p++ = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0);
  *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, Mutable(ikm), ikm.size());
  if (!salt.empty()) {
    *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, Mutable(salt), salt.size());
  }
  *p++ = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, Mutable(info), info.size());
  *p = OSSL_PARAM_construct_end();
  std::vector<uint8_t> out(length);
  STRAIT_OPENSSL_CHECK(EVP_KDF_derive(ctx.get(), out.data(), out.size(), params));
  return out;
}

}  // namespace strait::crypto
