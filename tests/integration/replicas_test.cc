// Replicas across sites end to end (issue 31): two pipelines of two stages, four strait-site
// processes and a gateway over mutual TLS on loopback.
//   every_step: the replicas' secure sums make them train what one pipeline with twice the batch
//     trains (`strait train` on the same file), within 1e-5 relative on every stage's parameters
//     after 50 steps, and the replicas of a stage end with the same bits.
//   outer: replicas that train apart and meet every 10 steps end with the same bits; a replica
//     killed with SIGKILL while its stage's outer round waits for it makes the federation roll
//     back, and the run ends with the bits of an uninterrupted one.
//   A stage of two machines in each replica trains, in either mode, the bits of two workers.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "site/nn/checkpoint.h"
#include "tests/integration/federation_fixture.h"

namespace strait::testing {
namespace {

using std::chrono::seconds;

const std::vector<std::string> kSites = {"dc-a", "dc-b", "dc-c", "dc-d"};

struct JobOptions {
  std::string sync = "every_step";
  std::string length = "steps: 50";
  std::string extra;                                  // More training keys.
  std::string stage1 = "{id: dc-b, layers: [2, 3]}";  // The second stage's site (dc-b and dc-d).
};

std::string JobYaml(const JobOptions& o) {
  return absl::StrReplaceAll(
      R"(name: replicas-test
gateway: {memory_budget: 64MiB}
model: {family: mlp, input: 784, hidden: [96, 64], classes: 10, dropout: 0.1, init_seed: 5}
data: {dataset: fashion-mnist, seed: 11}
training:
  LENGTH
  global_batch: 32
  microbatches: 4
  grad_clip: 1.0
  optimizer: {name: adamw, lr: 0.001}
  sync: SYNC
  fixed_point_bits: 28
  EXTRA
sites:
  - {id: dc-a, layers: [0, 2]}
  - STAGE1
replicas:
  - [dc-a, dc-b]
  - [dc-c, dc-d]
)",
      {{"LENGTH", o.length}, {"SYNC", o.sync}, {"EXTRA", o.extra}, {"STAGE1", o.stage1}});
}

// Trains every site to the end; the second stage's sites (dc-b, dc-d) on `ranks` machines each.
void TrainAll(BuildTreeFederation& fed, int ranks = 1) {
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  const std::vector<std::string> threads = {"--threads", "1"};
  for (const std::string& site : kSites) {
    if (ranks > 1 && (site == "dc-b" || site == "dc-d")) {
      fed.StartSiteRanks(site, ranks, threads);
    } else {
      fed.StartSite(site, threads);
    }
  }
  ASSERT_EQ(fed.WaitSites(kSites, seconds(600)), absl::OkStatus());
  for (const char* site : {"dc-b", "dc-d"}) {
    for (int r = 1; r < ranks; ++r) {
      const std::string rank = BuildTreeFederation::RankName(site, r);
      ASSERT_EQ(fed.WaitSite(rank, seconds(60)), 0) << rank << ":\n" << fed.SiteLog(rank);
    }
  }
}

// The two replicas of every stage hold the same parameters, byte for byte.
void ExpectReplicasAgree(BuildTreeFederation& fed, const std::string& a, const std::string& b) {
  absl::StatusOr<site::CheckpointState> x = site::ReadCheckpoint(fed.OutDir(a) + "/final.ckpt");
  absl::StatusOr<site::CheckpointState> y = site::ReadCheckpoint(fed.OutDir(b) + "/final.ckpt");
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(x->params.size(), y->params.size());
  EXPECT_EQ(0, std::memcmp(x->params.data(), y->params.data(), 4 * x->params.size()))
      << a << " and " << b << " hold different parameters";
}

TEST(ReplicasTest, EveryStepTrainsWhatOnePipelineWithTwiceTheBatchTrains) {
  BuildTreeFederation fed(JobYaml({}), kSites);
  TrainAll(fed);
  ASSERT_EQ(fed.RunReference({"--threads", "1"}, seconds(600)), 0)
      << harness::ReadFile(fed.dir().File("reference.log"));
  ExpectLikeReferenceUpToFloatOrder(fed, {"dc-a", "dc-b"});
  ExpectLikeReferenceUpToFloatOrder(fed, {"dc-c", "dc-d"});
  ExpectReplicasAgree(fed, "dc-a", "dc-c");
  ExpectReplicasAgree(fed, "dc-b", "dc-d");
}

const char kOuter[] = "outer";
const char kOuterKeys[] =
    "outer: {every: 10, lr: 0.7, momentum: 0.9}\n  checkpoint: {every: 10, dir: checkpoints}";

TEST(ReplicasTest, OuterRoundsEndWithTheReplicasAgreeing) {
  BuildTreeFederation fed(JobYaml({.sync = kOuter, .length = "steps: 45", .extra = kOuterKeys}),
                          kSites);
  TrainAll(fed);
  ExpectReplicasAgree(fed, "dc-a", "dc-c");
  ExpectReplicasAgree(fed, "dc-b", "dc-d");
  // Five rounds: after steps 10, 20, 30, 40 and the last, 45.
  const std::string log = harness::ReadFile(fed.SiteLogFile("dc-c"));
  EXPECT_NE(log.find("outer round after step 40"), std::string::npos) << log;
  EXPECT_NE(log.find("outer round after step 45"), std::string::npos) << log;
}

// Waits until `site`'s log has `text` (false after 300 s or if it exited).
bool WaitForLog(BuildTreeFederation& fed, const std::string& site, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + seconds(300);
  while (harness::ReadFile(fed.SiteLogFile(site)).find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > deadline || !fed.site(site).Running()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// dc-a stops (SIGSTOP) once the replicas are past their first rounds, so dc-c (its replica) soon
// waits for a round's sum that lacks dc-a's vector (well within the heartbeat timeout); dc-c is
// killed there and restarted with --resume, and the run must end as `clean` did.
void KillAReplicaDuringARound(const JobOptions& job, bool streamed) {
  BuildTreeFederation clean(JobYaml(job), kSites);
  TrainAll(clean);
  if (::testing::Test::HasFatalFailure()) return;

  BuildTreeFederation fed(JobYaml(job), kSites);
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  for (const std::string& site : kSites) fed.StartSite(site, {"--threads", "1"});
  ASSERT_TRUE(WaitForLog(fed, "dc-c", "outer round after step 20")) << fed.SiteLog("dc-c");
  fed.site("dc-a").Kill(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const std::string waiting = harness::ReadFile(fed.SiteLogFile("dc-c"));
  const size_t last_line = waiting.rfind('\n', waiting.size() - 2);
  // A streamed round is sent and the steps go on until it must land: dc-c waits there, its last
  // line the round's or a later step's.
  if (!streamed) {
    ASSERT_NE(waiting.find("outer round after step", last_line), std::string::npos)
        << "dc-c is not waiting in an outer round:\n"
        << waiting;
  }
  std::printf("dc-c killed while it waits: %s", waiting.substr(last_line + 1).c_str());
  ASSERT_TRUE(fed.site("dc-c").Running());
  fed.site("dc-c").Kill(SIGKILL);
  EXPECT_EQ(fed.WaitSite("dc-c", seconds(10)), 128 + SIGKILL);
  fed.site("dc-a").Kill(SIGCONT);
  fed.StartSite("dc-c", {"--threads", "1", "--resume"});
  ASSERT_EQ(fed.WaitSites(kSites, seconds(600)), absl::OkStatus());
  const std::string gateway_log = fed.gateway().LogTail(20000);
  EXPECT_NE(gateway_log.find("training restarts at step"), std::string::npos) << gateway_log;
  ExpectSameFinalState(fed, clean, kSites);
}

TEST(ReplicasTest, AReplicaKilledDuringAnOuterRoundRollsBackAndEndsWithTheSameBits) {
  KillAReplicaDuringARound({.sync = kOuter, .length = "steps: 60", .extra = kOuterKeys},
                           /*streamed=*/false);
}

// Streaming DiLoCo: 4 fragments, each round landing 2 steps after it was sent, 4-bit values, and
// checkpoints between rounds (they hold the rounds in flight).
const char kStreamedKeys[] =
    "outer: {every: 10, fragments: 4, delay: 2, bits: 4, lr: 0.7, momentum: 0.9}\n"
    "  checkpoint: {every: 7, dir: checkpoints}";

TEST(ReplicasTest, StreamedOuterRoundsEndWithTheReplicasAgreeing) {
  BuildTreeFederation fed(JobYaml({.sync = kOuter, .length = "steps: 45", .extra = kStreamedKeys}),
                          kSites);
  TrainAll(fed);
  ExpectReplicasAgree(fed, "dc-a", "dc-c");
  ExpectReplicasAgree(fed, "dc-b", "dc-d");
  const std::string log = harness::ReadFile(fed.SiteLogFile("dc-c"));
  for (int step : {3, 5, 8, 10, 43, 45}) {  // Fragment 3, 2, 1, 0's rounds, then the last.
    EXPECT_NE(log.find(absl::StrCat("outer round after step ", step, ":")), std::string::npos)
        << step << "\n"
        << log;
  }
}

TEST(ReplicasTest, AReplicaKilledWhileStreamedRoundsAreOutRollsBackAndEndsWithTheSameBits) {
  KillAReplicaDuringARound({.sync = kOuter, .length = "steps: 60", .extra = kStreamedKeys},
                           /*streamed=*/true);
}

// 2bw never flushes: a round lands on the newest weights between steps while the next step's
// first microbatches are in flight; the replicas still end with the same bits, and a kill still
// replays exactly.
const std::string k2bwStreamedKeys = std::string(kStreamedKeys) + "\n  schedule: 2bw";

TEST(ReplicasTest, StreamedOuterRoundsUnder2bwEndWithTheReplicasAgreeing) {
  BuildTreeFederation fed(
      JobYaml({.sync = kOuter, .length = "steps: 45", .extra = k2bwStreamedKeys}), kSites);
  TrainAll(fed);
  ExpectReplicasAgree(fed, "dc-a", "dc-c");
  ExpectReplicasAgree(fed, "dc-b", "dc-d");
}

TEST(ReplicasTest, AReplicaKilledUnder2bwWhileStreamedRoundsAreOutEndsWithTheSameBits) {
  KillAReplicaDuringARound({.sync = kOuter, .length = "steps: 60", .extra = k2bwStreamedKeys},
                           /*streamed=*/true);
}

// A stage of two machines in each replica (dc-b and dc-d with a follower rank each): the replicas'
// sums reach the followers (the mean gradient every step, the outer round's parameters), so the
// run ends with the bits of the same job whose stage runs as one process of two workers.
void ExpectTwoRanksTrainTheBitsOfTwoWorkers(JobOptions job) {
  job.stage1 = "{id: dc-b, layers: [2, 3], workers: 2}";
  BuildTreeFederation workers(JobYaml(job), kSites);
  TrainAll(workers);
  if (::testing::Test::HasFatalFailure()) return;
  job.stage1 = "{id: dc-b, layers: [2, 3], machines: 2}";
  BuildTreeFederation ranks(JobYaml(job), kSites);
  TrainAll(ranks, 2);
  if (::testing::Test::HasFatalFailure()) return;
  ExpectSameFinalState(ranks, workers, kSites);
  ExpectReplicasAgree(ranks, "dc-b", "dc-d");
}

TEST(ReplicasTest, EveryStepWithAStageOfTwoRanksTrainsTheBitsOfTwoWorkers) {
  ExpectTwoRanksTrainTheBitsOfTwoWorkers({.length = "steps: 20"});
}

TEST(ReplicasTest, OuterRoundsWithAStageOfTwoRanksTrainTheBitsOfTwoWorkers) {
  ExpectTwoRanksTrainTheBitsOfTwoWorkers(
      {.sync = kOuter, .length = "steps: 25", .extra = kOuterKeys});
}

}  // namespace
}  // namespace strait::testing
