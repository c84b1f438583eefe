// `layers: auto` end to end (issue 30): real processes on loopback with mutual TLS.
//   Every site measures its profile and probes its link, the gateway plans the split once all
//   three are in, logs it and serves it in its state, each site trains the range it was given,
//   and with lossless links the result is the bits of `strait train`.
//   A site killed mid-run and restarted takes its cached profile and the same plan, and the run
//   still ends with the bits of `strait train`.
//   A site that comes back slower (its profile says so) makes the gateway plan the split again: the
//   layers that change owner move through the gateway at the rollback, and the run still ends with
//   the bits of `strait train`.
//   A site running another job spec is refused with the first difference.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "plan/site_profile.h"
#include "tests/integration/federation_fixture.h"

namespace strait::testing {
namespace {

using std::chrono::seconds;
using ::testing::HasSubstr;

const std::vector<std::string> kSites = {"dc-a", "dc-b", "dc-c"};
const std::vector<std::string> kThreads = {"--threads", "1"};

std::string JobYaml(int steps, int hidden = 128) {
  return absl::StrReplaceAll(
      R"(name: planned-test
gateway: {memory_budget: 64MiB, heartbeat_timeout: 5s}
model: {family: mlp, input: 784, hidden: [HIDDEN, 96, 112, 80], classes: 10, init_seed: 5}
data: {dataset: fashion-mnist, seed: 11}
training:
  steps: STEPS
  global_batch: 64
  microbatches: 4
  extra_in_flight: auto
  optimizer: {name: adamw, lr: 0.001}
  checkpoint: {every: 10, dir: checkpoints, keep: 3}
sites:
  - {id: dc-a, layers: auto}
  - {id: dc-b, layers: auto}
  - {id: dc-c, layers: auto}
links:
  - {between: [dc-a, dc-b], forward: zstd, backward: none}
  - {between: [dc-b, dc-c], forward: none, backward: shuffle+zstd}
)",
      {{"STEPS", absl::StrCat(steps)}, {"HIDDEN", absl::StrCat(hidden)}});
}

// The range the gateway gave `site`, as its (latest) log says ("stage 1 of 3, layers [1, 3)").
std::string RangeOf(BuildTreeFederation& fed, const std::string& site) {
  const std::string log = fed.SiteLog(site);
  const size_t at = log.rfind(", layers [");
  return at == std::string::npos ? "" : log.substr(at + 9, log.find(')', at) - at - 8);
}

void StartAll(BuildTreeFederation& fed) {
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  for (const std::string& site : kSites) fed.StartSite(site, kThreads);
}

// Every site exits 0; the first that fails (or, after 300 s, the ones still running) fails the test
// at once with every log, the gateway's included.
void FinishAll(BuildTreeFederation& fed) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(300);
  std::vector<std::string> running = kSites;
  while (!running.empty()) {
    for (auto it = running.begin(); it != running.end();) {
      if (fed.site(*it).Running()) {
        ++it;
        continue;
      }
      const int code = fed.WaitSite(*it, seconds(10));
      std::string logs;
      for (const std::string& site : kSites) logs += "\n--- " + site + ":\n" + fed.SiteLog(site);
      ASSERT_EQ(code, 0) << *it << " failed" << logs << "\n--- gateway:\n"
                         << harness::ReadFile(fed.GatewayLogFile());
      it = running.erase(it);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::string logs;
      for (const std::string& site : kSites) logs += "\n--- " + site + ":\n" + fed.SiteLog(site);
      FAIL() << running.front() << " and others still run after 300 s" << logs << "\n--- gateway:\n"
             << harness::ReadFile(fed.GatewayLogFile());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Once `site` has written the checkpoint file `name`, kills it (SIGKILL); its range before.
std::string KillAfterItsCheckpoint(BuildTreeFederation& fed, const std::string& site,
                                   const std::string& name) {
  const std::string checkpoint = fed.dir().File("checkpoints/" + site + "/" + name);
  const auto deadline = std::chrono::steady_clock::now() + seconds(300);
  while (!std::filesystem::exists(checkpoint) && std::chrono::steady_clock::now() < deadline &&
         fed.site(site).Running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(std::filesystem::exists(checkpoint)) << fed.SiteLog(site);
  const std::string range = RangeOf(fed, site);
  fed.site(site).Kill(SIGKILL);
  fed.site(site).Wait(seconds(10));
  return range;
}

TEST(PlannedSplitTest, TheGatewayPlansTheSplitAndTheSitesTrainTheBitsOfOneMachine) {
  BuildTreeFederation fed(JobYaml(20), kSites);
  StartAll(fed);
  if (HasFatalFailure()) return;
  FinishAll(fed);
  if (HasFatalFailure()) return;
  const std::string gateway = harness::ReadFile(fed.GatewayLogFile());
  EXPECT_THAT(gateway, HasSubstr("planning the split: waiting for the profiles of"));
  EXPECT_THAT(gateway, HasSubstr("plan: planned split ["));
  EXPECT_THAT(gateway, HasSubstr("contiguous splits predicted"));
  // The three ranges tile the model's 5 layers in order.
  const std::string split =
      RangeOf(fed, "dc-a") + " " + RangeOf(fed, "dc-b") + " " + RangeOf(fed, "dc-c");
  EXPECT_THAT(gateway, HasSubstr("plan: planned split " + split)) << split;
  const v1::FederationState state = GatewayState(fed);  // What the dashboard shows.
  ASSERT_GT(state.plan_size(), 3);
  EXPECT_THAT(state.plan(0), HasSubstr("planned split " + split));
  for (const std::string& site : kSites) {
    EXPECT_THAT(fed.SiteLog(site), HasSubstr("measured the profile of 5 layers")) << site;
    EXPECT_TRUE(std::filesystem::exists(fed.dir().File("checkpoints/" + site + "/profile.json")));
  }
  ASSERT_EQ(fed.RunReference(kThreads, seconds(600)), 0)
      << harness::ReadFile(fed.dir().File("reference.log"));
  ExpectSameStateAsReference(fed, kSites, 20);
}

TEST(PlannedSplitTest, ARestartedSiteTakesItsCachedProfileAndTheSamePlan) {
  BuildTreeFederation fed(JobYaml(40), kSites);
  StartAll(fed);
  if (HasFatalFailure()) return;
  // Once dc-b has written its checkpoint of step 20, it dies and comes back.
  const std::string range = KillAfterItsCheckpoint(fed, "dc-b", "step-00000020.ckpt");
  if (HasFailure()) return;
  fed.StartSite("dc-b", {"--threads", "1", "--resume"});
  FinishAll(fed);
  if (HasFatalFailure()) return;
  EXPECT_THAT(fed.SiteLog("dc-b"), HasSubstr("took the cached profile of 5 layers"));
  EXPECT_EQ(RangeOf(fed, "dc-b"), range);
  ASSERT_EQ(fed.RunReference(kThreads, seconds(600)), 0)
      << harness::ReadFile(fed.dir().File("reference.log"));
  ExpectSameStateAsReference(fed, kSites, 40);
}

TEST(PlannedSplitTest, ASiteBackSlowerMakesTheLayersMoveAndTheBitsStay) {
  BuildTreeFederation fed(JobYaml(40), kSites);
  StartAll(fed);
  if (HasFatalFailure()) return;
  const std::string before = KillAfterItsCheckpoint(fed, "dc-b", "step-00000020.ckpt");
  if (HasFailure()) return;
  // dc-b comes back 30 times slower: its cached profile says so (a lower CPU quota would too, but
  // not every machine lets a test set one).
  const std::string cache = fed.dir().File("checkpoints/dc-b/profile.json");
  absl::StatusOr<plan::FederationProfile> profile = plan::ReadFederationProfile(cache);
  ASSERT_TRUE(profile.ok()) << profile.status();
  for (plan::SiteProfile& site : profile->sites) {
    for (plan::LayerProfile& layer : site.layers) {
      layer.forward_s *= 30, layer.backward_s *= 30, layer.update_s *= 30;
    }
  }
  ASSERT_TRUE(plan::WriteFederationProfile(*profile, cache).ok());
  fed.StartSite("dc-b", {"--threads", "1", "--resume"});
  FinishAll(fed);
  if (HasFatalFailure()) return;
  EXPECT_THAT(harness::ReadFile(fed.GatewayLogFile()), HasSubstr("planning it again"));
  EXPECT_THAT(fed.SiteLog("dc-b"), HasSubstr("took the cached profile of 5 layers"));
  EXPECT_NE(RangeOf(fed, "dc-b"), before) << fed.SiteLog("dc-b");
  std::string logs;
  for (const std::string& site : kSites) logs += fed.SiteLog(site);
  EXPECT_THAT(logs, HasSubstr("moving layers"));
  EXPECT_THAT(logs, HasSubstr("received layers"));
  ASSERT_EQ(fed.RunReference(kThreads, seconds(600)), 0)
      << harness::ReadFile(fed.dir().File("reference.log"));
  ExpectSameStateAsReference(fed, kSites, 40);
}

TEST(PlannedSplitTest, ASiteOfAnotherJobSpecIsRefusedWithTheDifference) {
  BuildTreeFederation fed(JobYaml(5), kSites);
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  // dc-c's spec has another first hidden layer: the gateway refuses its Plan call.
  const std::string other = fed.dir().File("other.yaml");
  std::ofstream(other) << JobYaml(5, 64);
  const std::string log = fed.dir().File("other.log");
  harness::Process site(
      {harness::Executables::InBuildTree(STRAIT_BINARY_DIR).site, "-c", other, "--site", "dc-c",
       "--gateway", fed.gateway_address(), "--out", fed.OutDir("dc-c"), "--threads", "1"},
      log);
  EXPECT_NE(site.Wait(seconds(120)), 0) << harness::ReadFile(log);
  EXPECT_THAT(harness::ReadFile(log), HasSubstr("runs another job spec than the gateway"));
}

}  // namespace
}  // namespace strait::testing
