// Failure and recovery end to end (DESIGN.md §7), real processes on loopback with mutual TLS and
// sealed links: a middle site killed with SIGKILL mid-run and restarted with --resume (schedules
// 1f1b and 2bw, whose checkpoints hold two weight versions), and a federation resumed over a
// corrupt and a truncated checkpoint, all end with parameters bit-identical to an uninterrupted
// `strait train` of the same job (lossless links).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "tests/integration/federation_fixture.h"

namespace strait::testing {
namespace {

using std::chrono::seconds;

const std::vector<std::string> kSites = {"dc-a", "dc-b", "dc-c"};

std::string JobYaml(int steps, int every, const std::string& schedule = "1f1b") {
  return absl::StrReplaceAll(
      R"(name: recovery-test
gateway: {memory_budget: 64MiB, heartbeat_timeout: 5s}
model: {family: mlp, input: 784, hidden: [128, 128, 128], classes: 10, dropout: 0.1, init_seed: 5}
data: {dataset: fashion-mnist, seed: 11}
training:
  steps: STEPS
  global_batch: 64
  microbatches: 4
  schedule: SCHEDULE
  grad_clip: 1.0
  optimizer: {name: adamw, lr: 0.001}
  checkpoint: {every: EVERY, dir: checkpoints, keep: 3}
sites:
  - {id: dc-a, layers: [0, 1]}
  - {id: dc-b, layers: [1, 3]}
  - {id: dc-c, layers: [3, 4]}
links:
  - {between: [dc-a, dc-b], forward: zstd, backward: none}
  - {between: [dc-b, dc-c], forward: shuffle+zstd, backward: none}
)",
      {{"STEPS", absl::StrCat(steps)}, {"EVERY", absl::StrCat(every)}, {"SCHEDULE", schedule}});
}

std::string CheckpointFile(BuildTreeFederation& fed, const std::string& site, int step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08d.ckpt", step);
  return fed.dir().File("checkpoints/" + site + "/" + name);
}

// Waits until `site` has written its checkpoint of `step` (false after 300 s or if it exited).
bool WaitForCheckpoint(BuildTreeFederation& fed, const std::string& site, int step) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(300);
  while (!std::filesystem::exists(CheckpointFile(fed, site, step))) {
    if (std::chrono::steady_clock::now() > deadline || !fed.site(site).Running()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

nlohmann::json Metrics(const std::string& dir) {
  return nlohmann::json::parse(harness::ReadFile(dir + "/metrics.json"), nullptr,
                               /*allow_exceptions=*/false);
}

void ExpectLikeReference(BuildTreeFederation& fed, int steps) {
  ASSERT_EQ(fed.RunReference({"--threads", "1"}, seconds(600)), 0)
      << harness::ReadFile(fed.dir().File("reference.log"));
  ExpectSameStateAsReference(fed, kSites, steps);
  const nlohmann::json last = Metrics(fed.OutDir("dc-c")), single = Metrics(fed.ReferenceDir());
  EXPECT_EQ(last["loss"], single["loss"]);  // Every step's loss, replayed steps included.
}

void KillTheMiddleSiteAndResume(const std::string& schedule) {
  const int steps = 400;
  BuildTreeFederation fed(JobYaml(steps, 20, schedule), kSites);
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  for (const std::string& site : kSites) fed.StartSite(site, {"--threads", "1"});

  // Kill dc-b at a random moment after its first checkpoints.
  std::mt19937 random(std::random_device{}());
  const int after = 20 * std::uniform_int_distribution<int>(1, 5)(random);
  ASSERT_TRUE(WaitForCheckpoint(fed, "dc-b", after)) << fed.SiteLog("dc-b");
  std::this_thread::sleep_for(
      std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 400)(random)));
  ASSERT_TRUE(fed.site("dc-b").Running()) << "dc-b finished before it could be killed";
  fed.site("dc-b").Kill(SIGKILL);
  EXPECT_EQ(fed.WaitSite("dc-b", seconds(10)), 128 + SIGKILL);
  std::printf("killed dc-b after its checkpoint of step %d\n", after);

  fed.StartSite("dc-b", {"--threads", "1", "--resume"});
  ASSERT_EQ(fed.WaitSites(kSites, seconds(600)), absl::OkStatus());
  const std::string gateway_log = fed.gateway().LogTail(20000);
  EXPECT_NE(gateway_log.find("training restarts at step"), std::string::npos) << gateway_log;
  const size_t resumed = gateway_log.find("training resumed");
  ASSERT_NE(resumed, std::string::npos) << gateway_log;
  std::printf("gateway: %s\n",
              gateway_log.substr(resumed, gateway_log.find('\n', resumed) - resumed).c_str());
  const std::string site_log = harness::ReadFile(fed.SiteLogFile("dc-b"));
  const size_t again = site_log.find("training again from step");
  ASSERT_NE(again, std::string::npos) << site_log;
  std::printf("dc-b: %s\n", site_log.substr(again, site_log.find('\n', again) - again).c_str());
  ExpectLikeReference(fed, steps);
}

TEST(RecoveryTest, AMiddleSiteKilledMidRunAndRestartedEndsBitIdentical) {
  KillTheMiddleSiteAndResume("1f1b");
}

// 2bw writes checkpoint N one step later (right after the update that makes L_N), with L_{N-1}.
TEST(RecoveryTest, TwoBwMiddleSiteKilledMidRunAndRestartedEndsBitIdentical) {
  KillTheMiddleSiteAndResume("2bw");
}

TEST(RecoveryTest, TheGatewayKilledMidRunAndRestartedEndsBitIdentical) {
  const int steps = 400;
  BuildTreeFederation fed(JobYaml(steps, 20), kSites);
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  for (const std::string& site : kSites) fed.StartSite(site, {"--threads", "1"});
  ASSERT_TRUE(WaitForCheckpoint(fed, "dc-c", 60)) << fed.SiteLog("dc-c");
  fed.gateway().Kill(SIGKILL);
  EXPECT_EQ(fed.gateway().Wait(seconds(10)), 128 + SIGKILL);
  std::this_thread::sleep_for(seconds(2));  // The sites notice and keep trying to join again.
  ASSERT_TRUE(fed.RestartGateway(&error)) << error;
  ASSERT_EQ(fed.WaitSites(kSites, seconds(300)), absl::OkStatus()) << FederationLogs(fed, kSites);
  for (const std::string& site : kSites) {
    EXPECT_NE(harness::ReadFile(fed.SiteLogFile(site)).find("joined the gateway at"),
              std::string::npos)
        << harness::ReadFile(fed.SiteLogFile(site));
  }
  const std::string gateway_log = fed.gateway().LogTail(20000);
  EXPECT_NE(gateway_log.find("training starts at step"), std::string::npos) << gateway_log;
  EXPECT_EQ(gateway_log.find("training starts at step 0 "), std::string::npos) << gateway_log;
  ExpectLikeReference(fed, steps);
}

// The port `strait wan` printed on its first line ("strait wan: 127.0.0.1:PORT -> ..."); 0 if none
// within 10 s.
int WanPort(const std::string& log_file) {
  const std::regex first_line("strait wan: 127\\.0\\.0\\.1:(\\d+) -> ");
  for (int i = 0; i < 200; ++i) {
    std::smatch m;
    const std::string log = harness::ReadFile(log_file);
    if (std::regex_search(log, m, first_line)) return std::stoi(m[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return 0;
}

TEST(RecoveryTest, ALinkCutForTenSecondsThenRestoredEndsBitIdentical) {
  const int steps = 300;
  BuildTreeFederation fed(JobYaml(steps, 20), kSites);
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  // dc-b reaches the gateway through `strait wan` (metro profile); SIGUSR1 cuts the link (every
  // connection closed, new ones refused), SIGUSR2 restores it.
  const std::string wan_log = fed.dir().File("wan.log");
  harness::Process wan({harness::Executables::InBuildTree(STRAIT_BINARY_DIR).strait, "wan",
                        "--forward", fed.gateway_address(), "--profile", "metro"},
                       wan_log);
  const int port = WanPort(wan_log);
  ASSERT_GT(port, 0) << wan.LogTail();
  fed.StartSite("dc-a", {"--threads", "1"});
  fed.StartSite("dc-b", {"--threads", "1"}, "127.0.0.1:" + std::to_string(port));
  fed.StartSite("dc-c", {"--threads", "1"});
  ASSERT_TRUE(WaitForCheckpoint(fed, "dc-b", 40)) << fed.SiteLog("dc-b");
  wan.Kill(SIGUSR1);
  std::this_thread::sleep_for(seconds(10));
  ASSERT_TRUE(fed.site("dc-b").Running()) << fed.SiteLog("dc-b");
  wan.Kill(SIGUSR2);
  ASSERT_EQ(fed.WaitSites(kSites, seconds(600)), absl::OkStatus());
  const std::string log = harness::ReadFile(fed.SiteLogFile("dc-b"));
  EXPECT_NE(log.find("cannot reach the gateway"), std::string::npos) << log;
  EXPECT_NE(log.find("joined the gateway at"), std::string::npos) << log;
  EXPECT_NE(fed.gateway().LogTail(20000).find("training restarts at step"), std::string::npos);
  EXPECT_NE(harness::ReadFile(wan_log).find("link cut (SIGUSR1)"), std::string::npos)
      << harness::ReadFile(wan_log);
  ExpectLikeReference(fed, steps);
}

TEST(RecoveryTest, ResumeSkipsACorruptAndATruncatedCheckpoint) {
  // A first run of 40 steps leaves checkpoints of steps 10..40 at every site.
  BuildTreeFederation fed(JobYaml(60, 10), kSites);
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  for (const std::string& site : kSites) fed.StartSite(site, {"--threads", "1", "--steps", "40"});
  ASSERT_EQ(fed.WaitSites(kSites, seconds(300)), absl::OkStatus());
  // dc-b's newest checkpoint gets a flipped byte, dc-a's newest loses its tail.
  {
    std::fstream f(CheckpointFile(fed, "dc-b", 40),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    char c = 0;
    f.read(&c, 1);
    f.seekp(1000);
    c ^= 0x10;
    f.write(&c, 1);
  }
  std::filesystem::resize_file(CheckpointFile(fed, "dc-a", 40),
                               std::filesystem::file_size(CheckpointFile(fed, "dc-a", 40)) / 2);

  // The whole federation restarts with --resume and trains on to step 60: it goes back to step 30,
  // the newest that every site holds intact.
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  for (const std::string& site : kSites) fed.StartSite(site, {"--threads", "1", "--resume"});
  ASSERT_EQ(fed.WaitSites(kSites, seconds(300)), absl::OkStatus());
  for (const char* site : {"dc-a", "dc-b"}) {
    const std::string log = fed.SiteLog(site);
    EXPECT_NE(log.find("refusing checkpoint"), std::string::npos) << log;
    EXPECT_NE(log.find("step-00000030.ckpt"), std::string::npos) << log;
  }
  EXPECT_NE(fed.gateway().LogTail(20000).find("training starts at step 30"), std::string::npos)
      << fed.gateway().LogTail(20000);
  ASSERT_EQ(fed.RunReference({"--threads", "1"}, seconds(600)), 0)
      << harness::ReadFile(fed.dir().File("reference.log"));
  ExpectSameStateAsReference(fed, kSites, 60);
}

}  // namespace
}  // namespace strait::testing
