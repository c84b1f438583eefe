// The OpenSSL check macro (DESIGN.md §9): turns a failed OpenSSL call and OpenSSL's thread-local
// error queue into an absl::Status naming the call and file:line. Also the owning pointer types for
// OpenSSL objects, so that every early return frees what it allocated.
#pragma once

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace strait::crypto {

// Drains this thread's OpenSSL error queue into an error Status (kInternal) whose message reads
// "<file>:<line>: <call> failed: <openssl reasons>". Never includes key material: OpenSSL's reason
// strings name the failing function and reason only. Thread-safe (the queue is per thread).
absl::Status OpenSslError(absl::string_view call, const char* file, int line);

// What counts as success for an OpenSSL return value: a positive int (1, or a length), true, or a
// non-null pointer.
inline bool OpenSslSucceeded(int result) { return result > 0; }
template <typename T>
inline bool OpenSslSucceeded(T* pointer) {
  return pointer != nullptr;
}

// Returns OpenSslError(...) from the enclosing function (which returns absl::Status or StatusOr)
// when `expr` fails by the rule above. Cheap on success (no queue access), so it is used on hot
// paths too.
#define STRAIT_OPENSSL_CHECK(expr)                                      \
  do {                                                                  \
    if (!::strait::crypto::OpenSslSucceeded(expr)) {                    \
      return ::strait::crypto::OpenSslError(#expr, __FILE__, __LINE__); \
    }                                                                   \
  } while (0)

// Owning pointers for the OpenSSL objects Strait uses.
template <auto kFree>
struct OpenSslDeleter {
  template <typename T>
  void operator()(T* p) const {
    kFree(p);
  }
};
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY_free>>;
using EvpPkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, OpenSslDeleter<EVP_PKEY_CTX_free>>;
using EvpCipherCtxPtr = std::unique_ptr<EVP_CIPHER_CTX, OpenSslDeleter<EVP_CIPHER_CTX_free>>;
using EvpMdCtxPtr = std::unique_ptr<EVP_MD_CTX, OpenSslDeleter<EVP_MD_CTX_free>>;
using X509Ptr = std::unique_ptr<X509, OpenSslDeleter<X509_free>>;
using X509StorePtr = std::unique_ptr<X509_STORE, OpenSslDeleter<X509_STORE_free>>;
using X509StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, OpenSslDeleter<X509_STORE_CTX_free>>;
using BioPtr = std::unique_ptr<BIO, OpenSslDeleter<BIO_free_all>>;

}  // namespace strait::crypto
