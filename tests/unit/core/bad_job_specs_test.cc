// Every file in tests/data/bad_specs/ is an invalid job spec whose first line is
//   # expect: LINE:COLUMN: message
// and loading it must fail with exactly "<path>:LINE:COLUMN: message".
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/job_spec.h"

namespace strait {
namespace {

const std::filesystem::path kDir =
    std::filesystem::path(STRAIT_SOURCE_DIR) / "tests/data/bad_specs";

std::vector<std::string> BadSpecNames() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class BadJobSpecTest : public testing::TestWithParam<std::string> {};

TEST_P(BadJobSpecTest, FailsWithItsExpectedMessage) {
  const std::string path = (kDir / (GetParam() + ".yaml")).string();
  std::ifstream in(path);
  std::string first_line;
  std::getline(in, first_line);
  const std::string kPrefix = "# expect: ";
  ASSERT_EQ(first_line.rfind(kPrefix, 0), 0u) << path << " must start with '" << kPrefix << "'";

  absl::StatusOr<JobSpec> spec = LoadJobSpec(path);
  ASSERT_FALSE(spec.ok()) << path << " was accepted";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(spec.status().message()), path + ":" + first_line.substr(kPrefix.size()));
}

INSTANTIATE_TEST_SUITE_P(AllFiles, BadJobSpecTest, testing::ValuesIn(BadSpecNames()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(BadJobSpecsTest, ThereAreAtLeastTwenty) { EXPECT_GE(BadSpecNames().size(), 20u); }

}  // namespace
}  // namespace strait
