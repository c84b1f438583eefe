// The executables' command lines: --help and --version everywhere, `strait config check` output and
// exit codes (0 valid, 2 invalid with file:line:column on stderr).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace {

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

Result RunCommand(const std::string& command) {
  Result result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

const std::string kBin = STRAIT_BINARY_DIR;
const std::string kSrc = STRAIT_SOURCE_DIR;

TEST(CliTest, EveryExecutableHasHelpAndVersion) {
  for (const std::string exe : {"/tools/strait", "/site/strait-site", "/gateway/strait-gateway"}) {
    Result help = RunCommand(kBin + exe + " --help");
    EXPECT_EQ(help.exit_code, 0) << exe << help.output;
    EXPECT_NE(help.output.find("Usage"), std::string::npos) << exe << help.output;
    Result version = RunCommand(kBin + exe + " --version");
    EXPECT_EQ(version.exit_code, 0) << exe;
    EXPECT_NE(version.output.find("0."), std::string::npos) << exe << version.output;
  }
}

TEST(CliTest, ConfigCheckPrintsTheSplit) {
  Result r =
      RunCommand(kBin + "/tools/strait config check " + kSrc + "/configs/fashion-mlp-3site.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* expected : {"fashion-mlp-3site.yaml: OK", "3,962,890 parameters", "site dc-a",
                               "layers [0, 2)", "fc0+relu", "[784] -> [1024]", "site dc-c",
                               "boundary 0 to dc-b: [32, 1024] fp32 = 128.0 KiB per microbatch"}) {
    EXPECT_NE(r.output.find(expected), std::string::npos) << "missing '" << expected << "' in\n"
                                                          << r.output;
  }
}

TEST(CliTest, ConfigCheckOfABrokenFileExitsTwoWithThePosition) {
  const std::string file = kSrc + "/tests/data/bad_specs/overlapping-ranges.yaml";
  Result r = RunCommand(kBin + "/tools/strait config check " + file);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(file + ":22:13: sites[1].layers: range [1, 3) overlaps sites[0] [0, 2)"),
            std::string::npos)
      << r.output;
}

TEST(CliTest, ConfigCheckOfAMissingFileExitsTwo) {
  Result r = RunCommand(kBin + "/tools/strait config check /nonexistent.yaml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("cannot open job spec '/nonexistent.yaml'"), std::string::npos)
      << r.output;
}

TEST(CliTest, DaemonsValidateTheirArguments) {
  Result r = RunCommand(kBin + "/site/strait-site --config " + kSrc +
                        "/configs/fashion-mlp-3site.yaml --site dc-z");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("no site 'dc-z'; the sites are dc-a, dc-b, dc-c"), std::string::npos)
      << r.output;
  Result g = RunCommand(kBin + "/gateway/strait-gateway");
  EXPECT_NE(g.exit_code, 0);
  EXPECT_NE(g.output.find("--config is required"), std::string::npos) << g.output;
}

}  // namespace
