// The site's session state machine against an in-process gateway: two SiteSessions (one thread
// each) joined through fake connectors, with sealed links, driven by the test as the gateway would
// drive them: the start barrier, a normal run, a Pause then a Rollback to a checkpoint (also with
// evaluations every N steps, which the replay repeats), a newer Rollback replacing one not taken
// yet, a lost gateway joined again, a rejoin that gives up, a Stop, and a resume past the last
// step. Runs that recover end with the parameters and per-step losses of `strait train`'s Trainer,
// bit for bit.
//
// No timing: the fake gateway holds back the frames of a chosen step, so the sessions stop there
// until the test moves on; every wait is a condition wait.
#include "site/daemon/site_session.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "crypto/certificates.h"
#include "harness/subprocess.h"
#include "site/backend/cpu/cpu_backend.h"
#include "site/pipeline/trainer.h"
#include "tests/unit/site/fake_gateway.h"

namespace strait::site {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr std::chrono::seconds kTimeout(120);  // Only bounds a hang; nothing waits this long.
constexpr int64_t kSteps = 8;

constexpr char kJob[] = R"(name: session-test
model: {family: mlp, input: 12, hidden: [16, 8], classes: 3, dropout: 0.2, init_seed: 3}
data: {dataset: synthetic, seed: 5, train_size: 256, test_size: 64}
training:
  steps: 8
  global_batch: 16
  microbatches: 4
  grad_clip: 0.3
  optimizer: {name: adamw, lr: 0.01}
  checkpoint: {every: 2, dir: DIR}
sites:
  - {id: a, layers: [0, 2]}
  - {id: b, layers: [2, 3]}
links:
  - {between: [a, b], forward: none, backward: zstd}
)";

// Collects what the sessions log (they log what the operator reads; some tests wait for a line).
class LogCapture : public spdlog::sinks::base_sink<std::mutex> {
 public:
  bool WaitFor(const std::string& text) {
    std::unique_lock<std::mutex> lock(lines_mu_);
    return cv_.wait_for(lock, kTimeout, [&] { return Contains(text); });
  }
  std::string Text() {
    std::lock_guard<std::mutex> lock(lines_mu_);
    std::string all;
    for (const std::string& line : lines_) absl::StrAppend(&all, line, "\n");
    return all;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    {
      std::lock_guard<std::mutex> lock(lines_mu_);
      lines_.emplace_back(msg.payload.data(), msg.payload.size());
    }
    cv_.notify_all();
  }
  void flush_() override {}

 private:
  bool Contains(const std::string& text) const {
    for (const std::string& line : lines_) {
      if (line.find(text) != std::string::npos) return true;
    }
    return false;
  }
  std::mutex lines_mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

// The gateway's side of the key exchange: each site's certificate, and its signed key of the
// newest join, handed to the site's neighbours (in the JoinReply, or as a control message to the
// ones already joined).
class FakeFederation {
 public:
  explicit FakeFederation(FakeGateway& gateway)
      : gateway_(gateway), ca_(*crypto::CreateCa("session-test")) {}
  FakeGateway& gateway() { return gateway_; }
  const crypto::CertifiedKey& ca() const { return ca_; }
  crypto::CertifiedKey Certificate(const std::string& site_id) {
    return *crypto::IssueSiteCertificate(ca_, site_id);
  }
  // Every join is a newer epoch than any before it, as with real sites (whose epochs follow the
  // clock): a site keeps the newest key of each neighbour, whatever order keys arrive in.
  uint32_t NextEpoch() {
    std::lock_guard<std::mutex> lock(mu_);
    return ++epoch_;
  }

  // `key` joined: the keys of the other sites for its JoinReply.
  std::vector<v1::SignedKey> Joined(const v1::SignedKey& key) {
    std::vector<v1::SignedKey> others;
    {
      std::lock_guard<std::mutex> lock(mu_);
      keys_[key.site_id()] = key;
      for (const auto& [id, k] : keys_) {
        if (id != key.site_id()) others.push_back(k);
      }
    }
    v1::Control relay;
    *relay.mutable_neighbour_key() = key;
    for (const v1::SignedKey& other : others) gateway_.Send(relay, other.site_id());
    return others;
  }

 private:
  FakeGateway& gateway_;
  const crypto::CertifiedKey ca_;
  std::mutex mu_;
  std::map<std::string, v1::SignedKey> keys_;
  uint32_t epoch_ = 0;
};

// A GatewayConnector over the fake gateway. Joins always succeed; Rejoin fails with
// `rejoin_error` when set, and waits while the test holds it (Gate) after it reconnected.
class FakeConnector : public GatewayConnector {
 public:
  FakeConnector(FakeFederation& federation, const std::string& site_id, ConnectionEvents events)
      : federation_(federation),
        site_id_(site_id),
        certificate_(federation.Certificate(site_id)),
        events_(std::move(events)),
        link_(federation.gateway(), site_id) {}

  absl::StatusOr<v1::JoinReply> Join(std::optional<int64_t> checkpoint) override {
    STRAIT_ASSIGN_OR_RETURN(
        security_, LinkSecurity::Create("session-test", federation_.NextEpoch(), certificate_,
                                        federation_.ca().certificate_pem));
    events_.joining();
    link_.OnControl(events_.control);
    v1::JoinReply reply;
    for (const v1::SignedKey& k : federation_.Joined(security_->own_key())) {
      *reply.add_neighbour_keys() = k;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      offered_.push_back(checkpoint);
    }
    cv_.notify_all();
    return reply;
  }

  absl::StatusOr<v1::JoinReply> Rejoin(std::optional<int64_t> checkpoint) override {
    if (!rejoin_error.ok()) return rejoin_error;
    absl::StatusOr<v1::JoinReply> reply = Join(checkpoint);
    std::unique_lock<std::mutex> lock(mu_);
    in_gate_ = true;
    cv_.notify_all();
    cv_.wait(lock, [this] { return !gated_; });
    in_gate_ = false;
    return reply;
  }

  GatewayLink& link() override { return link_; }
  const LinkSecurity* security() const override { return security_.get(); }

  // The connection is lost: no more control messages; the session hears of it.
  void Drop() {
    link_.OnControl(nullptr);
    events_.lost(absl::UnavailableError("the gateway closed the stream"));
  }
  // While gated, a Rejoin that reconnected does not return (the gateway may already talk to it).
  void Gate(bool gated) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      gated_ = gated;
    }
    cv_.notify_all();
  }
  bool WaitInGate() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kTimeout, [this] { return in_gate_; });
  }
  // Blocks until `joins` joins went through.
  bool WaitForJoins(size_t joins) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kTimeout, [&] { return offered_.size() >= joins; });
  }
  // The checkpoint each join offered.
  std::vector<std::optional<int64_t>> offered() {
    std::lock_guard<std::mutex> lock(mu_);
    return offered_;
  }

  absl::Status rejoin_error;  // Set before the session rejoins.

 private:
  FakeFederation& federation_;
  const std::string site_id_;
  const crypto::CertifiedKey certificate_;
  const ConnectionEvents events_;
  FakeGateway::Link link_;
  std::unique_ptr<LinkSecurity> security_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::optional<int64_t>> offered_;
  bool gated_ = false, in_gate_ = false;
};

// What stage `index` of `spec` reads of the data set (as strait-site loads it).
StageData DataOf(const JobSpec& spec, int index) {
  StageData data;
  if (index == 0 || index + 1 == static_cast<int>(spec.sites.size())) {
    data.train = std::make_shared<Dataset>(*LoadDataset(spec.data, spec.model, Split::kTrain));
    data.test = std::make_shared<Dataset>(*LoadDataset(spec.data, spec.model, Split::kTest));
  }
  data.test_size = *DatasetSize(spec.data, spec.model, Split::kTest);
  return data;
}

// One site: its session, its connector, its report (written to a temporary file), its thread.
class Site {
 public:
  Site(const JobSpec& spec, int index, FakeFederation& federation, SessionOptions options = {})
      : spec_(spec),
        index_(index),
        checkpoints_(spec, spec.sites[index].id, *Env::Default()),
        out_(std::tmpfile()),
        report_(kSteps, spec.training.global_batch, out_),
        session_(spec, JobView::Initial(spec), WithIndex(options, index),
                 MakeStageFactory(spec, index, kSteps, 1), checkpoints_, report_),
        connector_(federation, spec.sites[index].id, session_.events()) {}
  ~Site() {
    if (thread_.joinable()) thread_.join();
    std::fclose(out_);
  }

  // Joins, then runs the session on its own thread.
  void Start() {
    thread_ = std::thread([this] {
      absl::Status status = session_.Join(connector_);
      if (status.ok()) status = session_.Run(connector_, DataOf(spec_, index_));
      std::lock_guard<std::mutex> lock(mu_);
      status_ = status;
      done_ = true;
      done_cv_.notify_all();
    });
  }
  // Waits for the session's end; its status. DEADLINE_EXCEEDED if it hangs (a failed test: the
  // fixture's TearDown stops it).
  absl::Status Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!done_cv_.wait_for(lock, kTimeout, [this] { return done_; })) {
      return absl::DeadlineExceededError(id() + " did not end");
    }
    return status_;
  }

  const std::string& id() const { return spec_.sites[index_].id; }
  SiteSession& session() { return session_; }
  FakeConnector& connector() { return connector_; }
  const LossHistory& losses() const { return report_.losses(); }
  const CheckpointStore& checkpoints() const { return checkpoints_; }
  // What the session printed (progress and "interrupted" lines).
  std::string Output() {
    std::fflush(out_);
    std::string text(static_cast<size_t>(std::ftell(out_)), '\0');
    std::rewind(out_);
    text.resize(std::fread(text.data(), 1, text.size(), out_));
    std::fseek(out_, 0, SEEK_END);
    return text;
  }

 private:
  static SessionOptions WithIndex(SessionOptions options, int index) {
    options.index = index;
    options.total_steps = kSteps;
    options.report_interval_s = 0.02;  // Tests wait for what the reports say.
    return options;
  }

  const JobSpec& spec_;
  const int index_;
  CheckpointStore checkpoints_;
  std::FILE* const out_;
  RunReport report_;
  SiteSession session_;
  FakeConnector connector_;  // After the session: it calls the session's handlers.
  std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  absl::Status status_;
  std::thread thread_;
};

v1::Control Rollback(int64_t step, uint32_t generation) {
  v1::Control control;
  control.mutable_rollback()->set_step(static_cast<uint64_t>(step));
  control.mutable_rollback()->set_generation(generation);
  return control;
}

v1::Control Pause(const std::string& reason) {
  v1::Control control;
  control.mutable_pause()->set_reason(reason);
  return control;
}

v1::Control Stop(const std::string& reason) {
  v1::Control control;
  control.mutable_stop()->set_reason(reason);
  return control;
}

class SiteSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<JobSpec> spec =
        ParseJobSpec(absl::StrReplaceAll(kJob, {{"DIR", dir_.path()}}), "session-test.yaml", "/");
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *std::move(spec);
    log_ = std::make_shared<LogCapture>();
    spdlog::default_logger()->sinks().push_back(log_);
  }
  void TearDown() override {
    // A test that failed half-way leaves sessions waiting: end them before their threads are joined
    // (and before the log sink goes).
    for (auto& site : sites_) site->connector().Gate(false);
    gateway_.Send(Stop("the test is over"));
    sites_.clear();
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::find(sinks.begin(), sinks.end(), log_));
  }

  // Both sites, joined and waiting for the gateway's start.
  void StartBoth(SessionOptions options = {}) {
    for (int i = 0; i < 2; ++i) {
      sites_.push_back(std::make_unique<Site>(spec_, i, federation_, options));
    }
    for (auto& site : sites_) site->Start();
    for (auto& site : sites_) ASSERT_TRUE(site->connector().WaitForJoins(1));
  }
  Site& a() { return *sites_[0]; }
  Site& b() { return *sites_[1]; }

  // Generation `generation` trains until the frames of step `step` are needed (held back by the
  // gateway): both sites have completed `step` steps (their reports say so) and written the
  // checkpoints of the steps before, and wait in step `step`.
  void TrainUntil(int64_t step, uint32_t generation) {
    gateway_.Hold([=](const v1::TensorKey& key) {
      return key.generation() == generation && static_cast<int64_t>(key.step()) >= step;
    });
    gateway_.Send(Rollback(0, generation));
    const int64_t newest = step / spec_.training.checkpoint.every * spec_.training.checkpoint.every;
    for (auto& site : sites_) {
      ASSERT_TRUE(gateway_.WaitForReport(site->id(),
                                         [&](const v1::SiteReport& r) {
                                           return static_cast<int64_t>(r.step()) == step &&
                                                  r.has_checkpoint() &&
                                                  static_cast<int64_t>(r.checkpoint_step()) ==
                                                      newest;
                                         }))
          << site->id() << " did not reach step " << step << "\n"
          << log_->Text();
    }
  }

  // Both sessions ended OK with the parameters and per-step losses of one process.
  void ExpectLikeOneProcess() {
    for (auto& site : sites_) {
      absl::Status status = site->Wait();
      ASSERT_TRUE(status.ok()) << site->id() << ": " << status << "\n" << log_->Text();
    }
    auto trainer = *Trainer::Create(spec_, *CreateCpuBackend(1));
    std::vector<double> losses;
    for (int64_t s = 0; s < kSteps; ++s) losses.push_back(trainer->Step()->loss);
    const std::vector<float> reference = *trainer->stage().Params();
    size_t offset = 0;
    for (auto& site : sites_) {
      const std::vector<float> params = *site->session().stage().Params();
      ASSERT_LE(offset + params.size(), reference.size());
      EXPECT_EQ(0, std::memcmp(params.data(), reference.data() + offset, 4 * params.size()))
          << site->id();
      offset += params.size();
    }
    EXPECT_EQ(offset, reference.size());
    EXPECT_EQ(b().losses().first_step(), 0);
    EXPECT_EQ(b().losses().losses(), losses);  // One per step: replayed steps replaced.
    ASSERT_TRUE(b().session().figures().evaluation.has_value());
    EXPECT_EQ(b().session().figures().evaluation->accuracy, trainer->Evaluate()->accuracy);
    EXPECT_EQ(b().session().figures().evaluation->loss, trainer->Evaluate()->loss);
    for (auto& site : sites_) {
      const std::vector<v1::SiteReport> reports = gateway_.reports(site->id());
      ASSERT_FALSE(reports.empty());
      EXPECT_TRUE(reports.back().finished()) << site->id();
      EXPECT_EQ(reports.back().step(), static_cast<uint64_t>(kSteps));
      // The last stage's last report carries the held-out figures (for the dashboard).
      EXPECT_EQ(reports.back().has_evaluation(), site.get() == &b()) << site->id();
    }
    EXPECT_EQ(gateway_.reports(b().id()).back().evaluation().accuracy(),
              trainer->Evaluate()->accuracy);
  }

  harness::TempDir dir_;
  JobSpec spec_;
  FakeGateway gateway_;
  FakeFederation federation_{gateway_};
  std::shared_ptr<LogCapture> log_;
  std::vector<std::unique_ptr<Site>> sites_;
};

TEST_F(SiteSessionTest, TrainsToTheEndLikeOneProcess) {
  StartBoth();
  gateway_.Send(Rollback(0, 1));
  ExpectLikeOneProcess();
  EXPECT_THAT(b().Output(), HasSubstr("step      8/8  loss "));
  EXPECT_THAT(a().Output(), HasSubstr("step      8/8  "));
  EXPECT_THAT(a().Output(), Not(HasSubstr("loss")));  // The first stage has no loss.
  EXPECT_EQ(a().checkpoints().Steps(), (std::vector<int64_t>{4, 6, 8}));
  EXPECT_EQ(a().connector().offered(), (std::vector<std::optional<int64_t>>{std::nullopt}));
  EXPECT_EQ(a().session().figures().steps_done, kSteps);
}

TEST_F(SiteSessionTest, WaitsForTheGatewaysStart) {
  SessionOptions options;
  options.start_notice = std::chrono::milliseconds(10);
  sites_.push_back(std::make_unique<Site>(spec_, 0, federation_, options));
  a().Start();
  ASSERT_TRUE(log_->WaitFor("waiting for the gateway to start training"));
  // Joined and waiting: nothing trained, nothing sent.
  EXPECT_EQ(gateway_.pushes(), 0u);
  EXPECT_EQ(gateway_.pulls(), 0u);
  EXPECT_EQ(a().Output(), "");
  sites_.push_back(std::make_unique<Site>(spec_, 1, federation_, options));
  b().Start();
  ASSERT_TRUE(b().connector().WaitForJoins(1));
  gateway_.Send(Rollback(0, 1));
  ExpectLikeOneProcess();
}

TEST_F(SiteSessionTest, PauseThenRollbackResumesFromTheCheckpoint) {
  StartBoth();
  TrainUntil(5, 1);  // Checkpoints of steps 2 and 4; losses of steps 0-4 recorded.
  gateway_.Send(Pause("site c is down"));
  gateway_.Send(Rollback(2, 2));
  ExpectLikeOneProcess();
  for (auto& site : sites_) {
    const std::string out = site->Output();
    EXPECT_THAT(out, HasSubstr("interrupted at step 5: paused: site c is down\n")) << out;
    // The first line after the interruption is the replayed step 3 (steps 2 and 3 again).
    const std::string after = out.substr(out.find("interrupted"));
    EXPECT_THAT(after, HasSubstr("\nstep      3/8")) << out;
    EXPECT_EQ(gateway_.reports(site->id()).back().generation(), 2u);
  }
  EXPECT_THAT(log_->Text(), HasSubstr("step-00000002.ckpt (generation 2)"));
  EXPECT_THAT(log_->Text(), HasSubstr("training again from step 2"));
}

// training.eval_every: the last site evaluates through the pipeline after every 2 steps, prints and
// reports it; a rollback replays the evaluations of the steps it replays. The figures are those of
// `strait train`'s Trainer evaluating after the same steps, and training is the bits of a run that
// never evaluates (ExpectLikeOneProcess).
TEST_F(SiteSessionTest, EvaluatesEveryNStepsAndAgainWhereARollbackReplays) {
  spec_.training.eval_every = 2;
  StartBoth();
  TrainUntil(5, 1);  // Evaluated after steps 2 and 4.
  gateway_.Send(Pause("site c is down"));
  gateway_.Send(Rollback(2, 2));  // From step 2 again: evaluated at 2, 4, 6, then at the end.
  ExpectLikeOneProcess();

  auto trainer = *Trainer::Create(spec_, *CreateCpuBackend(1));
  std::vector<StepEvaluation> expected;
  while (trainer->step() < kSteps) {
    ASSERT_TRUE(trainer->Step().ok());
    if (trainer->step() % 2 == 0) expected.push_back({trainer->step(), *trainer->Evaluate()});
  }
  const std::vector<StepEvaluation>& evaluations = b().session().figures().evaluations;
  ASSERT_EQ(evaluations.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(evaluations[i].step, expected[i].step);
    EXPECT_EQ(evaluations[i].evaluation.loss, expected[i].evaluation.loss) << i;
    EXPECT_EQ(evaluations[i].evaluation.accuracy, expected[i].evaluation.accuracy) << i;
  }
  EXPECT_TRUE(a().session().figures().evaluations.empty());

  // The last site prints each one (steps 2 and 4 in both generations: the second starts with the
  // evaluation of the checkpoint it resumes from); the first site evaluates silently.
  const std::string out = b().Output();
  const std::string after = out.substr(out.find("interrupted"));
  const std::string before = out.substr(0, out.find("interrupted"));
  for (const char* line : {"step 2: test accuracy ", "step 4: test accuracy "}) {
    EXPECT_THAT(before, HasSubstr(line)) << out;
  }
  EXPECT_THAT(before, Not(HasSubstr("step 6: "))) << out;
  for (const char* line :
       {"step 2: test accuracy ", "step 4: test accuracy ", "step 6: test accuracy "}) {
    EXPECT_THAT(after, HasSubstr(line)) << out;
  }
  EXPECT_THAT(a().Output(), Not(HasSubstr("test accuracy")));
  // The reports carry the newest evaluation while training goes on (the dashboard's Held-out).
  const std::vector<v1::SiteReport> reports = gateway_.reports(b().id());
  EXPECT_TRUE(std::any_of(reports.begin(), reports.end(), [](const v1::SiteReport& r) {
    return r.has_evaluation() && r.step() < static_cast<uint64_t>(kSteps);
  }));
}

TEST_F(SiteSessionTest, ANewerRollbackReplacesOneNotTakenYet) {
  StartBoth();
  TrainUntil(5, 1);
  // The gateway restarts; both sites reconnect, and before either takes a start, the gateway sends
  // two rollbacks: only the newer one trains.
  for (auto& site : sites_) site->connector().Gate(true);
  for (auto& site : sites_) site->connector().Drop();
  for (auto& site : sites_) ASSERT_TRUE(site->connector().WaitInGate()) << log_->Text();
  gateway_.Send(Rollback(2, 2));
  gateway_.Send(Rollback(4, 3));
  for (auto& site : sites_) site->connector().Gate(false);
  ExpectLikeOneProcess();
  EXPECT_THAT(log_->Text(), Not(HasSubstr("(generation 2)")));
  EXPECT_THAT(log_->Text(), HasSubstr("step-00000004.ckpt (generation 3)"));
  for (auto& site : sites_) {
    EXPECT_EQ(gateway_.reports(site->id()).back().generation(), 3u);
    const std::string out = site->Output();
    EXPECT_THAT(out.substr(out.find("interrupted")), HasSubstr("\nstep      5/8")) << out;
  }
}

TEST_F(SiteSessionTest, ALostGatewayIsJoinedAgainAndTrainingGoesOn) {
  StartBoth();
  TrainUntil(5, 1);
  for (auto& site : sites_) site->connector().Drop();
  for (auto& site : sites_) ASSERT_TRUE(site->connector().WaitForJoins(2)) << log_->Text();
  // The gateway rebuilt its view from what the sites offered: their newest checkpoint.
  for (auto& site : sites_) {
    EXPECT_EQ(site->connector().offered(), (std::vector<std::optional<int64_t>>{std::nullopt, 4}));
  }
  gateway_.Send(Rollback(4, 2));
  ExpectLikeOneProcess();
  EXPECT_THAT(log_->Text(), HasSubstr("lost the gateway: the gateway closed the stream; joining"));
  for (auto& site : sites_) {
    EXPECT_THAT(site->Output(), HasSubstr("interrupted at step 5: the gateway closed the stream"));
  }
}

TEST_F(SiteSessionTest, GivesUpWhenTheGatewayDoesNotComeBackNamingTheCheckpoint) {
  StartBoth();
  TrainUntil(5, 1);
  const absl::Status refused = absl::UnavailableError(
      "lost the gateway at 127.0.0.1:7443 and could not join it again within 3 s (connection "
      "refused).");
  for (auto& site : sites_) site->connector().rejoin_error = refused;
  for (auto& site : sites_) site->connector().Drop();
  for (auto& site : sites_) {
    const absl::Status status = site->Wait();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(
        status.message(),
        absl::StrCat(refused.message(), " The checkpoint of step 4 is in ", dir_.path(), "/",
                     site->id(), ": start this site again with --resume once the gateway is back"));
    EXPECT_FALSE(gateway_.reports(site->id()).back().finished());
  }
}

TEST_F(SiteSessionTest, GivesUpBeforeAnyCheckpointAndAStopEndsTheJob) {
  StartBoth();
  b().connector().rejoin_error = absl::UnavailableError("lost the gateway (refused).");
  b().connector().Drop();
  const absl::Status lost = b().Wait();
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(lost.message(),
            "lost the gateway (refused). No checkpoint was written: the run starts "
            "over");
  gateway_.Send(Stop("operator"), "a");
  const absl::Status stopped = a().Wait();
  EXPECT_EQ(stopped.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(stopped.message(), "the gateway stopped the job: operator");
}

TEST_F(SiteSessionTest, ResumingPastTheLastStepIsAnError) {
  sites_.push_back(std::make_unique<Site>(spec_, 0, federation_));
  a().Start();
  ASSERT_TRUE(a().connector().WaitForJoins(1));
  gateway_.Send(Rollback(kSteps + 1, 1));
  const absl::Status status = a().Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), "the federation resumes at step 9, past this job's 8 steps");
}

TEST_F(SiteSessionTest, ResumeOffersTheNewestCheckpointAndTrainsOnFromIt) {
  {
    StartBoth();
    TrainUntil(5, 1);  // Checkpoints of step 4 on both sites; then both stop.
    gateway_.Send(Stop("maintenance"));
    for (auto& site : sites_) EXPECT_EQ(site->Wait().code(), absl::StatusCode::kAborted);
    sites_.clear();
    gateway_.Release();
  }
  // Restarted with --resume: each offers its newest checkpoint, and the federation goes on from it.
  SessionOptions options;
  options.resume = true;
  StartBoth(options);
  for (auto& site : sites_) {
    EXPECT_EQ(site->connector().offered(), (std::vector<std::optional<int64_t>>{4}));
  }
  gateway_.Send(Rollback(4, 2));
  for (auto& site : sites_) ASSERT_TRUE(site->Wait().ok()) << log_->Text();
  EXPECT_EQ(b().losses().first_step(), 4);
  EXPECT_EQ(b().losses().losses().size(), 4u);
  auto trainer = *Trainer::Create(spec_, *CreateCpuBackend(1));
  for (int64_t s = 0; s < kSteps; ++s) ASSERT_TRUE(trainer->Step().ok());
  const std::vector<float> reference = *trainer->stage().Params();
  const std::vector<float> a_params = *a().session().stage().Params();
  EXPECT_EQ(0, std::memcmp(a_params.data(), reference.data(), 4 * a_params.size()));
}

}  // namespace
}  // namespace strait::site
