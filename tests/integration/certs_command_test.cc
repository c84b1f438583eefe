// `strait certs init|issue|show` as an operator runs it: the real binary in a temporary folder.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "crypto/certificates.h"
#include "crypto/pem.h"

namespace strait {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Result Strait(const std::string& args) {
  const std::string command = std::string(STRAIT_BINARY_DIR) + "/tools/strait " + args + " 2>&1";
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe))
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

class CertsCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("strait_certs_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string File(const char* name) const { return (dir_ / name).string(); }
  std::string Dir() const { return "--dir " + dir_.string(); }

  std::filesystem::path dir_;
};

TEST_F(CertsCommandTest, InitIssueShowAndRefuseToOverwrite) {
  Result init = Strait("certs init " + Dir() + " --name demo-fed");
  ASSERT_EQ(init.exit_code, 0) << init.output;
  EXPECT_THAT(init.output, HasSubstr("CN=demo-fed federation CA"));
  struct stat st;
  ASSERT_EQ(stat(File("ca.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string ca_key = *crypto::ReadPemFile(File("ca.key"));

  Result again = Strait("certs init " + Dir());
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_THAT(again.output, HasSubstr("refusing to overwrite"));
  EXPECT_EQ(*crypto::ReadPemFile(File("ca.key")), ca_key);

  Result gateway = Strait("certs issue " + Dir() + " --gateway gw.example.org,10.1.2.3 --days 30");
  ASSERT_EQ(gateway.exit_code, 0) << gateway.output;
  Result site = Strait("certs issue " + Dir() + " --site east");
  ASSERT_EQ(site.exit_code, 0) << site.output;
  EXPECT_EQ(Strait("certs issue " + Dir() + " --site east").exit_code, 2);
  EXPECT_EQ(Strait("certs issue " + Dir() + " --site east --force").exit_code, 0);
  EXPECT_EQ(Strait("certs issue " + Dir() + " --site Bad!").exit_code, 2);
  EXPECT_NE(Strait("certs issue " + Dir()).exit_code, 0);

  Result show = Strait("certs show " + File("gateway.pem") + " " + File("east.pem"));
  ASSERT_EQ(show.exit_code, 0) << show.output;
  EXPECT_THAT(show.output, HasSubstr("SANs:        DNS:gw.example.org, IP:10.1.2.3"));
  EXPECT_THAT(show.output, HasSubstr("issuer:      CN=demo-fed federation CA,O=strait"));
  EXPECT_THAT(show.output, HasSubstr("site id:     east"));
  EXPECT_THAT(show.output, HasSubstr("valid:"));

  // What was issued verifies against the CA, for its role, with the 30-day validity.
  const std::string ca = *crypto::ReadPemFile(File("ca.pem"));
  EXPECT_TRUE(
      crypto::VerifySiteCertificate(ca, *crypto::ReadPemFile(File("east.pem")), crypto::DenyList())
          .ok());
  auto info = crypto::DescribeCertificate(*crypto::ReadPemFile(File("gateway.pem")));
  EXPECT_NEAR(absl::ToDoubleHours(info->not_after - info->not_before), 30 * 24, 1e-6);

  // No command ever prints a key.
  for (const Result* r : {&init, &gateway, &site, &show}) {
    EXPECT_THAT(r->output, Not(HasSubstr("PRIVATE KEY")));
  }
  EXPECT_EQ(Strait("certs show " + File("east.key")).exit_code, 2);
}

}  // namespace
}  // namespace strait
