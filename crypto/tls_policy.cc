#include "crypto/tls_policy.h"

#include <openssl/conf.h>
#include <openssl/ssl.h>

#include <memory>

#include "crypto/openssl_check.h"

namespace strait::crypto {
namespace {

// The TLS settings every TLS context of this process starts from: TLS 1.3 only, and at least the
// security level Debian's own configuration sets.
constexpr char kTls13Only[] = R"(strait_tls = strait_tls_init
[strait_tls_init]
ssl_conf = strait_ssl
[strait_ssl]
system_default = strait_tls13
[strait_tls13]
Protocol = -ALL, TLSv1.3
MinProtocol = TLSv1.3
CipherString = DEFAULT:@SECLEVEL=2
)";

}  // namespace

// gRPC 1.51 (Debian 12) has no setting for the TLS versions of its credentials (it came with gRPC
// 1.60) and sets TLS 1.2 as the minimum of each context it creates. OpenSSL applies the
// configuration's `system_default` section to a new context before that, and a version disabled
// there by `Protocol` (SSL_OP_NO_TLSv1_2) stays disabled whatever minimum is set afterwards. The
// section is loaded from memory, not from a file an operator could edit.
absl::Status RequireTls13ForNewContexts() {
  static const absl::Status loaded = []() -> absl::Status {
    // OpenSSL reads its configuration file once, at the first initialisation: done here first so
    // that it cannot replace this process's settings later.
    STRAIT_OPENSSL_CHECK(OPENSSL_init_ssl(OPENSSL_INIT_LOAD_CONFIG, nullptr));
    BioPtr text(BIO_new_mem_buf(kTls13Only, sizeof(kTls13Only) - 1));
    STRAIT_OPENSSL_CHECK(text.get());
    std::unique_ptr<CONF, OpenSslDeleter<NCONF_free>> config(NCONF_new(nullptr));
    STRAIT_OPENSSL_CHECK(config.get());
    long error_line = 0;
    STRAIT_OPENSSL_CHECK(NCONF_load_bio(config.get(), text.get(), &error_line));
    STRAIT_OPENSSL_CHECK(CONF_modules_load(config.get(), "strait_tls", 0));
    return absl::OkStatus();
  }();
  return loaded;
}

}  // namespace strait::crypto
