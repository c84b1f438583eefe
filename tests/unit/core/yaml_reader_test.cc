#include "core/yaml_reader.h"

#include <gtest/gtest.h>

namespace strait {
namespace {

YamlMap Map(const char* text) { return YamlMap("t.yaml", YAML::Load(text), "root"); }

TEST(YamlReaderTest, BytesWithUnits) {
  YamlMap map = Map("a: 1048576\nb: 64KiB\nc: 1.5 GB\nd: 2MiB\ne: 10 B");
  uint64_t v = 0;
  ASSERT_TRUE(map.Bytes("a", 0, &v).ok());
  EXPECT_EQ(v, 1048576u);
  ASSERT_TRUE(map.Bytes("b", 0, &v).ok());
  EXPECT_EQ(v, 65536u);
  ASSERT_TRUE(map.Bytes("c", 0, &v).ok());
  EXPECT_EQ(v, 1500000000u);
  ASSERT_TRUE(map.Bytes("d", 0, &v).ok());
  EXPECT_EQ(v, 2u << 20);
  EXPECT_FALSE(map.Bytes("e", 100, &v).ok());  // below the minimum
}

TEST(YamlReaderTest, BytesRejectsGarbage) {
  YamlMap map = Map("a: lots\nb: 1.5\nc: 12XB\nd: [1]");
  uint64_t v = 7;
  EXPECT_FALSE(map.Bytes("a", 0, &v).ok());
  EXPECT_FALSE(map.Bytes("b", 0, &v).ok());  // not a whole number of bytes
  absl::Status s = map.Bytes("c", 0, &v);
  EXPECT_NE(s.message().find("unknown size unit 'XB'"), absl::string_view::npos) << s;
  EXPECT_FALSE(map.Bytes("d", 0, &v).ok());
  EXPECT_EQ(v, 7u);  // untouched on error
}

TEST(YamlReaderTest, Seconds) {
  YamlMap map = Map("a: 10\nb: 250ms\nc: 2m\nd: 3h\ne: 1e-3");
  double v = 0;
  ASSERT_TRUE(map.Seconds("a", 0, &v).ok());
  EXPECT_DOUBLE_EQ(v, 10);
  ASSERT_TRUE(map.Seconds("b", 0, &v).ok());
  EXPECT_DOUBLE_EQ(v, 0.25);
  ASSERT_TRUE(map.Seconds("c", 0, &v).ok());
  EXPECT_DOUBLE_EQ(v, 120);
  EXPECT_FALSE(map.Seconds("d", 0, &v).ok());
  ASSERT_TRUE(map.Seconds("e", 0, &v).ok());
  EXPECT_DOUBLE_EQ(v, 0.001);
}

TEST(YamlReaderTest, ErrorsPointAtTheValue) {
  YamlMap map = Map("x: 1\ncount: many\n");
  int v = 0;
  absl::Status s = map.Int("count", 0, 10, &v);
  EXPECT_EQ(s.message(), "t.yaml:2:8: root.count: expected an integer, found 'many'");
}

TEST(YamlReaderTest, MissingRequiredKeyPointsAtTheMapping) {
  YamlMap map = Map("x: 1\n");
  std::string v;
  absl::Status s = map.String("id", &v, /*required=*/true);
  EXPECT_EQ(s.message(), "t.yaml:1:1: root.id: missing; expected a string under 'root'");
}

TEST(YamlReaderTest, FinishRejectsUnknownKeysAndNamesTheKnownOnes) {
  YamlMap map = Map("alpha: 1\nbeta: 2\n");
  int v = 0;
  ASSERT_TRUE(map.Int("alpha", 0, 9, &v).ok());
  ASSERT_TRUE(map.Int("gamma", 0, 9, &v).ok());  // optional and absent
  absl::Status s = map.Finish();
  EXPECT_EQ(s.message(), "t.yaml:2:1: root.beta: unknown key; expected one of alpha, gamma");
}

TEST(YamlReaderTest, NonMappingIsReported) {
  YamlMap map = Map("[1, 2]");
  EXPECT_FALSE(map.status().ok());
  EXPECT_FALSE(map.Has("a"));
}

TEST(YamlReaderTest, ReadingDoesNotInsertKeys) {
  YAML::Node doc = YAML::Load("a: 1\n");
  YamlMap map("t.yaml", doc, "");
  std::string v;
  ASSERT_TRUE(map.String("absent", &v).ok());
  ASSERT_TRUE(map.String("a", &v).ok());
  EXPECT_EQ(doc.size(), 1u);
  EXPECT_TRUE(map.Finish().ok());
}

}  // namespace
}  // namespace strait
