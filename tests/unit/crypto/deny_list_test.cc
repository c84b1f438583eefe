#include "crypto/deny_list.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strait::crypto {
namespace {

TEST(DenyListTest, ParsesSpellingsAndComments) {
  auto list = DenyList::Parse(
      "# revoked 2024-05-01\n"
      "3F:A2:00:01\n"
      "\n"
      "serial: 0x00ab  # stolen laptop\n"
      "  DEADBEEF\n",
      "deny.txt");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->size(), 3u);
  EXPECT_TRUE(list->IsRevoked("3fa20001"));
  EXPECT_TRUE(list->IsRevoked("3F:A2:00:01"));
  EXPECT_TRUE(list->IsRevoked("AB"));
  EXPECT_TRUE(list->IsRevoked("00:AB"));
  EXPECT_TRUE(list->IsRevoked("de:ad:be:ef"));
  EXPECT_FALSE(list->IsRevoked("3FA2"));
  EXPECT_FALSE(list->IsRevoked(""));
  EXPECT_FALSE(DenyList().IsRevoked("AB"));
}

TEST(DenyListTest, BadLineNamesFileAndLine) {
  auto list = DenyList::Parse("AB\nnot-a-serial\n", "deny.txt");
  EXPECT_EQ(list.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(list.status().message()), ::testing::HasSubstr("deny.txt:2"));
}

TEST(DenyListTest, MissingFileIsNotFound) {
  EXPECT_EQ(DenyList::Load("/nonexistent/deny.txt").status().code(), absl::StatusCode::kNotFound);
}

TEST(DenyListTest, NormalizeSerial) {
  EXPECT_EQ(NormalizeSerial("00:00"), "0");
  EXPECT_EQ(NormalizeSerial(":"), "");
  EXPECT_EQ(NormalizeSerial("0x0A:bC"), "abc");
  EXPECT_EQ(NormalizeSerial("xyz"), "");
}

}  // namespace
}  // namespace strait::crypto
