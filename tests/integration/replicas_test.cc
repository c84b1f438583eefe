// Replicas across sites end to end (issue 31): two pipelines of two stages, four strait-site
// processes and a gateway over mutual TLS on loopback.
//   every_step: the replicas' secure sums make them train what one pipeline with twice the batch
//     trains (`strait train` on the same file), within 1e-5 relative on every stage's parameters
//     after 50 steps, and the replicas of a stage end with the same bits.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
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
  std::string extra;  // More training keys.
};

std::string JobYaml(const JobOptions& o) {
  return absl::StrReplaceAll(
      R"(name: replicas-test
gateway: {memory_budget: 64MiB}
model: {family: mlp, input: 784, hidden: [96, 64], classes: 10, init_seed: 5}
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
  - {id: dc-b, layers: [2, 3]}
replicas:
  - [dc-a, dc-b]
  - [dc-c, dc-d]
)",
      {{"LENGTH", o.length}, {"SYNC", o.sync}, {"EXTRA", o.extra}});
}

void TrainAll(BuildTreeFederation& fed) {
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  for (const std::string& site : kSites) fed.StartSite(site, {"--threads", "1"});
  for (const std::string& site : kSites) {
    ASSERT_EQ(fed.WaitSite(site, seconds(600)), 0) << site << ":\n" << fed.SiteLog(site);
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
      << ReadFile(fed.dir().File("reference.log"));
  ExpectLikeReferenceUpToFloatOrder(fed, {"dc-a", "dc-b"});
  ExpectLikeReferenceUpToFloatOrder(fed, {"dc-c", "dc-d"});
  ExpectReplicasAgree(fed, "dc-a", "dc-c");
  ExpectReplicasAgree(fed, "dc-b", "dc-d");
}

}  // namespace
}  // namespace strait::testing
