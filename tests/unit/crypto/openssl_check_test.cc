#include "crypto/openssl_check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>

namespace strait::crypto {
namespace {

using ::testing::HasSubstr;

absl::Status FetchCipher(const char* name) {
  EVP_CIPHER* cipher = EVP_CIPHER_fetch(nullptr, name, nullptr);
  STRAIT_OPENSSL_CHECK(cipher);
  EVP_CIPHER_free(cipher);
  return absl::OkStatus();
}

TEST(OpenSslCheckTest, SuccessIsOk) { EXPECT_TRUE(FetchCipher("AES-256-GCM").ok()); }

TEST(OpenSslCheckTest, FailureNamesCallFileLineAndOpenSslReason) {
  const absl::Status status = FetchCipher("NO-SUCH-CIPHER");
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(status.message()), HasSubstr("openssl_check_test.cc:"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("cipher failed"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("unsupported"));  // OpenSSL's reason string.
  // The queue is drained: the next error does not repeat this one.
  EXPECT_EQ(ERR_peek_error(), 0u);
}

TEST(OpenSslCheckTest, SuccessRule) {
  EXPECT_TRUE(OpenSslSucceeded(1));
  EXPECT_TRUE(OpenSslSucceeded(42));  // Lengths.
  EXPECT_FALSE(OpenSslSucceeded(0));
  EXPECT_FALSE(OpenSslSucceeded(-1));
  int x = 0;
  EXPECT_TRUE(OpenSslSucceeded(&x));
  EXPECT_FALSE(OpenSslSucceeded(static_cast<int*>(nullptr)));
}

}  // namespace
}  // namespace strait::crypto
