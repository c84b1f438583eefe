// Knowledge sharing through a federation (issue 46): a student of two sites taught by a teacher of
// two sites, real strait-gateway and strait-site processes over mutual TLS on loopback.
//   Fidelity: with lossless links the student's sites end with the parameters and optimizer state
//     of `strait train` on the same job spec (its teacher in the same process), byte for byte.
//   What leaves a teacher site: every frame a teacher site sent is a TEACH frame of the size of a
//     microbatch's activations or targets, never of a weight.
//   Faults: a teacher site killed with SIGKILL mid-run and restarted with --resume: the federation
//     pauses, rolls back to the student's checkpoint, and still ends bit-identical.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/job_spec.h"
#include "site/exchange/teacher_targets_codec.h"
#include "tests/integration/federation_fixture.h"

namespace strait::testing {
namespace {

using std::chrono::seconds;

const std::vector<std::string> kStudent = {"dc-a", "dc-b"};
const std::vector<std::string> kTeacher = {"teach-a", "teach-b"};
constexpr int kMicrobatch = 16;  // global_batch 64 over 4 microbatches.

const char kTeacherModel[] =
    "{family: mlp, input: 784, hidden: [256, 256], classes: 10, init_seed: 3}";

// The teacher, trained first with `strait train` (its final.ckpt holds the whole model).
std::string TeacherJobYaml() {
  return absl::StrReplaceAll(R"(name: teacher-job
model: MODEL
data: {dataset: fashion-mnist, seed: 11}
training:
  steps: 40
  global_batch: 64
  optimizer: {name: adamw, lr: 0.002}
sites:
  - {id: t, layers: [0, 3]}
)",
                             {{"MODEL", kTeacherModel}});
}

std::string StudentJobYaml(const std::string& teacher_checkpoint, int steps) {
  return absl::StrReplaceAll(R"(name: teach-test
gateway: {memory_budget: 64MiB, heartbeat_timeout: 5s}
model: {family: mlp, input: 784, hidden: [64, 64], classes: 10, dropout: 0.1, init_seed: 5}
data: {dataset: fashion-mnist, seed: 11}
training:
  steps: STEPS
  global_batch: 64
  microbatches: 4
  grad_clip: 1.0
  optimizer: {name: adamw, lr: 0.001}
  checkpoint: {every: 10, dir: checkpoints, keep: 3}
  distill: {alpha: 0.3, temperature: 2.0}
sites:
  - {id: dc-a, layers: [0, 1]}
  - {id: dc-b, layers: [1, 3]}
teacher:
  model: MODEL
  checkpoint: CHECKPOINT
  top_k: 4
  values: int8
  sites:
    - {id: teach-a, layers: [0, 1]}
    - {id: teach-b, layers: [1, 3]}
)",
                             {{"STEPS", absl::StrCat(steps)},
                              {"MODEL", kTeacherModel},
                              {"CHECKPOINT", teacher_checkpoint}});
}

nlohmann::json Metrics(const std::string& dir) {
  return nlohmann::json::parse(harness::ReadFile(dir + "/metrics.json"), nullptr,
                               /*allow_exceptions=*/false);
}

std::vector<std::string> Members() {
  std::vector<std::string> all = kStudent;
  all.insert(all.end(), kTeacher.begin(), kTeacher.end());
  return all;
}

class TeacherSitesTest : public ::testing::Test {
 protected:
  // Trains the teacher once for the whole suite.
  static void SetUpTestSuite() {
    teacher_ = new BuildTreeFederation(TeacherJobYaml(), {"t"});
    ASSERT_EQ(teacher_->RunReference({"--threads", "1"}, seconds(600)), 0)
        << harness::ReadFile(teacher_->dir().File("reference.log"));
  }
  static void TearDownTestSuite() {
    delete teacher_;
    teacher_ = nullptr;
  }
  static std::string TeacherCheckpoint() { return teacher_->ReferenceDir() + "/final.ckpt"; }

  // The federation's student sites end as `strait train` with the teacher in one process does.
  static void ExpectLikeReference(BuildTreeFederation& fed, int steps) {
    ASSERT_EQ(fed.RunReference({"--threads", "1"}, seconds(600)), 0)
        << harness::ReadFile(fed.dir().File("reference.log"));
    ExpectSameStateAsReference(fed, kStudent, steps);
    EXPECT_EQ(Metrics(fed.OutDir("dc-b"))["loss"], Metrics(fed.ReferenceDir())["loss"]);
  }

  static BuildTreeFederation* teacher_;
};
BuildTreeFederation* TeacherSitesTest::teacher_ = nullptr;

TEST_F(TeacherSitesTest, TeacherSitesTeachTheSameBitsAsOneProcess) {
  const int steps = 30;
  BuildTreeFederation fed(StudentJobYaml(TeacherCheckpoint(), steps), Members());
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  for (const std::string& site : Members()) fed.StartSite(site, {"--threads", "1"});
  ASSERT_EQ(fed.WaitSites(Members(), seconds(600)), absl::OkStatus())
      << FederationLogs(fed, Members());
  ExpectLikeReference(fed, steps);

  // What crossed from each teacher site: TEACH frames only, one per microbatch, each of a
  // microbatch's activations (teach-a: 16 x 256 floats) or its targets (teach-b), every one far
  // smaller than the teacher's smallest weight matrix (256 x 256 floats).
  const uint64_t expected_bytes[] = {
      uint64_t{kMicrobatch} * 256 * 4,
      site::TeacherTargetsBytes(kMicrobatch, 4, TeacherValues::kInt8, 10)};
  for (int t = 0; t < 2; ++t) {
    const nlohmann::json metrics = Metrics(fed.OutDir(kTeacher[t]));
    ASSERT_TRUE(metrics.contains("links")) << metrics.dump();
    EXPECT_EQ(metrics["teacher"], true);
    uint64_t sent_frames = 0;
    for (const nlohmann::json& link : metrics["links"]) {
      EXPECT_EQ(link["teach"], true) << kTeacher[t] << ": " << link.dump();
      if (!link["sent"].get<bool>()) continue;
      EXPECT_EQ(link["boundary"], t);
      const auto frames = link["frames"].get<uint64_t>();
      sent_frames += frames;
      EXPECT_EQ(link["raw_bytes"].get<uint64_t>(), frames * expected_bytes[t]) << link.dump();
      EXPECT_LT(expected_bytes[t], uint64_t{256} * 256 * 4);
    }
    EXPECT_EQ(sent_frames, uint64_t{steps} * 4) << kTeacher[t];
    EXPECT_FALSE(std::filesystem::exists(fed.OutDir(kTeacher[t]) + "/final.ckpt"));
  }
  // The student's last stage received the targets, and says how long it waited for them.
  const nlohmann::json last = Metrics(fed.OutDir("dc-b"));
  bool got_targets = false;
  for (const nlohmann::json& link : last["links"]) {
    if (link["teach"].get<bool>() && !link["sent"].get<bool>()) {
      got_targets = true;
      EXPECT_EQ(link["frames"].get<uint64_t>(), uint64_t{steps} * 4);
      EXPECT_EQ(link["raw_bytes"].get<uint64_t>(), uint64_t{steps} * 4 * expected_bytes[1]);
    }
  }
  EXPECT_TRUE(got_targets) << last.dump();
  EXPECT_TRUE(last["time"].contains("teacher_wait_s")) << last.dump();
}

// The first teacher site (which reads the data and is paced by the student) and the last (which
// sends the targets), each killed in a run of its own.
class TeacherKillTest : public TeacherSitesTest,
                        public ::testing::WithParamInterface<std::string> {};

TEST_P(TeacherKillTest, ATeacherSiteKilledMidRunAndRestartedEndsBitIdentical) {
  const std::string victim = GetParam();
  const int steps = 120;
  BuildTreeFederation fed(StudentJobYaml(TeacherCheckpoint(), steps), Members());
  fed.AppendLogs();
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  for (const std::string& site : Members()) fed.StartSite(site, {"--threads", "1"});
  // Killed once the student has a checkpoint to roll back to.
  const std::string checkpoint = fed.dir().File("checkpoints/dc-b/step-00000020.ckpt");
  const auto deadline = std::chrono::steady_clock::now() + seconds(300);
  while (!std::filesystem::exists(checkpoint) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(std::filesystem::exists(checkpoint)) << FederationLogs(fed, Members());
  ASSERT_TRUE(fed.site(victim).Running()) << victim << " finished before it could be killed";
  fed.site(victim).Kill(SIGKILL);
  EXPECT_EQ(fed.WaitSite(victim, seconds(10)), 128 + SIGKILL);
  std::printf("killed %s after the student's checkpoint of step 20\n", victim.c_str());

  fed.StartSite(victim, {"--threads", "1", "--resume"});
  ASSERT_EQ(fed.WaitSites(Members(), seconds(600)), absl::OkStatus())
      << FederationLogs(fed, Members());
  const std::string gateway_log = fed.gateway().LogTail(20000);
  const size_t restart = gateway_log.find("training restarts at step");
  ASSERT_NE(restart, std::string::npos) << gateway_log;
  std::printf("gateway: %s\n",
              gateway_log.substr(restart, gateway_log.find('\n', restart) - restart).c_str());
  ExpectLikeReference(fed, steps);
}

INSTANTIATE_TEST_SUITE_P(EachTeacherSite, TeacherKillTest, ::testing::ValuesIn(kTeacher));

}  // namespace
}  // namespace strait::testing
