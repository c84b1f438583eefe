#include "crypto/hkdf.h"

#include <gtest/gtest.h>

#include "tests/unit/crypto/hex.h"

namespace strait::crypto {
namespace {

using testing::Hex;
using testing::ToHex;

// RFC 5869 appendix A.1 (test case 1).
TEST(HkdfTest, Rfc5869TestCase1) {
  auto okm = HkdfSha256(Hex("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b"),
                        Hex("000102030405060708090a0b0c"), Hex("f0f1f2f3f4f5f6f7f8f9"), 42);
  ASSERT_TRUE(okm.ok()) << okm.status();
  EXPECT_EQ(ToHex(*okm),
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865");
}

// RFC 5869 appendix A.3 (test case 3): empty salt and info.
TEST(HkdfTest, Rfc5869TestCase3EmptySaltAndInfo) {
  auto okm = HkdfSha256(Hex("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b"), {}, {}, 42);
  ASSERT_TRUE(okm.ok()) << okm.status();
  EXPECT_EQ(ToHex(*okm),
            "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8");
}

TEST(HkdfTest, RejectsImpossibleLengths) {
  const std::vector<uint8_t> ikm(32, 1);
  EXPECT_FALSE(HkdfSha256(ikm, {}, {}, 0).ok());
  EXPECT_FALSE(HkdfSha256(ikm, {}, {}, 255 * 32 + 1).ok());
  EXPECT_TRUE(HkdfSha256(ikm, {}, {}, 255 * 32).ok());
}

}  // namespace
}  // namespace strait::crypto
