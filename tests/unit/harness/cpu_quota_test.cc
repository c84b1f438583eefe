// A site's CPU quota (tools/cpu_quota.h): the cgroup holds the limit asked for and the process put
// in it, and goes when the quota does. Skipped (77) where no cgroup hierarchy is writable: the
// error then says what to do. How much the quota slows a site is measured in benchmarks, not here.
#include "harness/cpu_quota.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "harness/subprocess.h"

namespace strait::harness {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class CpuQuotaEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<CpuQuota>> probe = CpuQuota::Create("probe", 0.5);
    if (!probe.ok()) {
      std::fprintf(stderr, "skipping: %s\n", std::string(probe.status().message()).c_str());
      std::exit(77);
    }
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new CpuQuotaEnvironment);

TEST(CpuQuotaTest, HoldsTheLimitAndTheProcessAndGoesAway) {
  std::string path;
  {
    absl::StatusOr<std::unique_ptr<CpuQuota>> quota = CpuQuota::Create("dc-b", 0.3);
    ASSERT_TRUE(quota.ok()) << quota.status();
    path = (*quota)->path();
    EXPECT_EQ(*(*quota)->Limit(), "30000 100000");  // 30 ms of CPU every 100 ms.
    const std::string log = testing::TempDir() + "/sleeper.log";
    {
      Process sleeper({"/bin/sleep", "30"}, log);
      ASSERT_TRUE((*quota)->Add(sleeper.pid()).ok());
      EXPECT_NE(Read(path + "/cgroup.procs").find(std::to_string(sleeper.pid())),
                std::string::npos);
      sleeper.Kill(SIGKILL);
      sleeper.Wait(std::chrono::seconds(10));
    }
  }
  EXPECT_FALSE(std::filesystem::exists(path)) << path << " left behind";
}

TEST(CpuQuotaTest, RefusesANonPositiveShare) {
  EXPECT_EQ(CpuQuota::Create("x", 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuQuota::Create("x", -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuQuota::Create("x", 0.005).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CpuQuotaTest, ParsesSiteCpusAndNamesTheBadOne) {
  absl::StatusOr<std::map<std::string, double>> cores =
      ParseSiteCpus({"dc-a=0.7", "dc-b=0.25"}, {"dc-a", "dc-b", "dc-c"});
  ASSERT_TRUE(cores.ok()) << cores.status();
  EXPECT_EQ(cores->size(), 2u);
  EXPECT_DOUBLE_EQ(cores->at("dc-b"), 0.25);
  for (const char* bad : {"dc-z=0.5", "dc-a", "dc-a=fast"}) {
    absl::StatusOr<std::map<std::string, double>> refused =
        ParseSiteCpus({bad}, {"dc-a", "dc-b", "dc-c"});
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.status().message().find("expected SITE=CORES"), std::string::npos);
  }
}

}  // namespace
}  // namespace strait::harness
