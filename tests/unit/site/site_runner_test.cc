// The site pipeline in one process: three SiteRunners (one thread each, their own CPU backends)
// exchanging sealed frames through an in-process gateway reproduce Trainer's bits (1f1b, gpipe and
// 2bw, whose stream runs across steps; also a 2bw run resumed from checkpoints; with evaluations
// between steps, whose figures are Trainer's too), and a frame altered on the way is refused,
// counted, and stops the consumer.
#include "site/pipeline/site_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compression/chain_spec.h"
#include "core/job_spec.h"
#include "core/tied_embeddings.h"
#include "site/backend/backend_factory.h"
#include "site/backend/cpu/cpu_backend.h"
#include "site/pipeline/stage_checkpoint.h"
#include "site/pipeline/stage_executor.h"
#include "site/pipeline/trainer.h"
#include "tests/unit/site/fake_gateway.h"

namespace strait::site {
namespace {

constexpr char kJob[] = R"(name: runner-test
model: {family: mlp, input: 12, hidden: [16, 16, 8], classes: 3, dropout: 0.2, init_seed: 3}
data: {dataset: synthetic, seed: 5, train_size: 256, test_size: 70}
training: {steps: 6, global_batch: 16, microbatches: 4, schedule: SCHEDULE, grad_clip: 0.3,
           optimizer: {name: adamw, lr: 0.01}}
sites:
  - {id: a, layers: [0, 2]}
  - {id: b, layers: [2, 3]}
  - {id: c, layers: [3, 4]}
links:
  - {between: [a, b], forward: CHAIN, backward: CHAIN}
  - {between: [b, c], forward: CHAIN, backward: CHAIN}
)";

// schedule may add training keys ("2bw, extra_in_flight: 2") and end in " +cosine" (the
// optimizer's cosine learning-rate decay). Every job clips; with "update: eager" (clipping with the
// norm of the step before) at 0.05, below the steps' norms, so that the lagged scale matters.
JobSpec Spec(std::string schedule, const std::string& chain) {
  const std::string kCosine = " +cosine";
  const bool cosine = absl::EndsWith(schedule, kCosine);
  if (cosine) schedule.resize(schedule.size() - kCosine.size());
  std::string text = kJob;
  text.replace(text.find("SCHEDULE"), 8, schedule);
  if (absl::StrContains(schedule, "eager")) text.replace(text.find("0.3"), 3, "0.05");
  for (size_t at; (at = text.find("CHAIN")) != std::string::npos;) text.replace(at, 5, chain);
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "runner-test.yaml", "/");
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (cosine) spec->training.optimizer.decay = LrDecay::kCosine;
  return *spec;
}

crypto::DirectionKey DirectionKey(uint8_t seed) {
  crypto::DirectionKey key;
  for (size_t i = 0; i < key.key.size(); ++i) key.key[i] = static_cast<uint8_t>(seed * 31 + i);
  key.nonce_salt = {seed, 9, 9, 9};
  key.key_epoch = 1;
  return key;
}

struct SiteUnderTest {
  const JobSpec* spec = nullptr;
  std::unique_ptr<StageExecutor> stage;
  std::unique_ptr<SiteRunner> runner;
  SiteMetrics metrics;
  absl::Status status;
  std::optional<Evaluation> evaluation;
  std::vector<double> drains;               // StepResult::drain_s of each step taken.
  std::vector<double> losses;               // Of each step taken (last stage).
  std::vector<StepEvaluation> evaluations;  // Between steps and at the end (last stage).
};

// Builds the three sites over `gateway` (site i with workers[i] CPU workers); the link of boundary
// b seals direction d with key 2b+d. With `checkpoints`, site i resumes from checkpoints[i] (all of
// step start_step) in rollback generation 1.
std::vector<std::unique_ptr<SiteUnderTest>> Federation(
    const JobSpec& spec, FakeGateway& gateway, FakeGateway::Link& link,
    std::vector<int> workers = {1, 1, 1}, int64_t start_step = 0,
    const std::vector<std::string>& checkpoints = {}, BoundaryCodecs codecs = BoundaryCodecs::kAuto,
    DeviceKind device = DeviceKind::kCpu) {
  std::vector<std::unique_ptr<SiteUnderTest>> sites;
  const int stages = static_cast<int>(spec.sites.size());
  for (int i = 0; i < stages; ++i) {
    auto site = std::make_unique<SiteUnderTest>();
    site->spec = &spec;
    site->stage =
        *StageExecutor::Create(spec.model, spec.sites[i].layers,
                               WithDecayHorizon(spec.training.optimizer, spec.training.steps),
                               spec.training.MicrobatchSize(), VersioningOf(spec.training),
                               {.device = device,
                                .count = workers[i],
                                .precision = spec.training.precision,
                                .boundary_codecs = codecs});
    if (!checkpoints.empty()) {
      absl::StatusOr<int64_t> loaded = LoadStageCheckpoint(checkpoints[i], spec, *site->stage);
      EXPECT_TRUE(loaded.ok()) << loaded.status();
      EXPECT_EQ(*loaded, start_step);
    }
    StageLinks links;
    const uint64_t max_raw = 1 << 20;
    if (i > 0) {
      const LinkSpec& l = spec.links[i - 1];
      links.forward_in =
          *FrameReceiver::Create(link,
                                 std::make_unique<FrameDecoder>(
                                     *crypto::Opener::Create(DirectionKey(2 * (i - 1))), max_raw),
                                 {spec.sites[i - 1].id, i - 1, v1::FORWARD}, site->metrics, 3);
      links.backward_out = *FrameSender::Create(
          link,
          *FrameEncoder::Create(l.backward,
                                *crypto::Sealer::Create(DirectionKey(2 * (i - 1) + 1), 1 << 30)),
          i - 1, v1::BACKWARD, site->metrics, 3);
    }
    if (i + 1 < stages) {
      const LinkSpec& l = spec.links[i];
      links.forward_out = *FrameSender::Create(
          link,
          *FrameEncoder::Create(l.forward, *crypto::Sealer::Create(DirectionKey(2 * i), 1 << 30)),
          i, v1::FORWARD, site->metrics, 3);
      links.backward_in = *FrameReceiver::Create(
          link,
          std::make_unique<FrameDecoder>(*crypto::Opener::Create(DirectionKey(2 * i + 1)), max_raw),
          {spec.sites[i + 1].id, i, v1::BACKWARD}, site->metrics, 3);
    }
    if (TiedAcrossSites(spec) && stages >= 3 && (i == 0 || i + 1 == stages)) {
      // The first and the last site's own link: keys 2 * stages (forward) and 2 * stages + 1.
      const bool first = i == 0;
      const uint8_t out = 2 * stages + (first ? 0 : 1), in = 2 * stages + (first ? 1 : 0);
      links.tied_out = *FrameSender::Create(
          link, *FrameEncoder::Create("none", *crypto::Sealer::Create(DirectionKey(out), 1 << 30)),
          0, first ? v1::FORWARD : v1::BACKWARD, site->metrics, 3);
      links.tied_in = *FrameReceiver::Create(
          link, std::make_unique<FrameDecoder>(*crypto::Opener::Create(DirectionKey(in)), max_raw),
          {spec.sites[first ? stages - 1 : 0].id, 0, first ? v1::BACKWARD : v1::FORWARD},
          site->metrics, 3);
    }
    StageData data;
    if (i == 0 || i + 1 == stages) {
      data.train = std::make_shared<Dataset>(*LoadDataset(spec.data, spec.model, Split::kTrain));
      data.test = std::make_shared<Dataset>(*LoadDataset(spec.data, spec.model, Split::kTest));
    }
    data.test_size = *DatasetSize(spec.data, spec.model, Split::kTest);
    site->runner = std::make_unique<SiteRunner>(
        spec, i, *site->stage, StageIo{std::move(links), std::move(data)}, site->metrics,
        StepRange{.total_steps = spec.training.steps,
                  .start_step = start_step,
                  .generation = checkpoints.empty() ? 0u : 1u});
    sites.push_back(std::move(site));
  }
  return sites;
}

// Evaluates through the pipeline after the steps done so far; the last stage records it.
absl::Status EvaluateNow(SiteUnderTest& s) {
  absl::StatusOr<std::optional<Evaluation>> evaluation = s.runner->Evaluate();
  if (!evaluation.ok()) return evaluation.status();
  if (*evaluation) s.evaluations.push_back({s.runner->step(), **evaluation});
  s.evaluation = *evaluation;
  return absl::OkStatus();
}

// Trains every site up to `steps` steps on its own thread, evaluating between steps where
// training.eval_every says (as the site's session does), then (at the end of the run) evaluates
// and flushes.
void RunAll(std::vector<std::unique_ptr<SiteUnderTest>>& sites, int64_t steps,
            bool end_of_run = true) {
  std::vector<std::thread> threads;
  for (auto& site : sites) {
    threads.emplace_back([&site, steps, end_of_run] {
      SiteUnderTest& s = *site;
      const TrainingSpec& t = s.spec->training;
      while (s.status.ok() && s.runner->step() < steps) {
        const bool evaluate = t.EvaluatesAfter(s.runner->step() + 1, t.steps);
        absl::StatusOr<StepResult> step = s.runner->Step(evaluate);
        s.status = step.status();
        if (!step.ok()) break;
        s.drains.push_back(step->drain_s);
        if (step->loss) s.losses.push_back(*step->loss);
        if (evaluate) s.status = EvaluateNow(s);
      }
      if (!s.status.ok() || !end_of_run) return;
      s.status = EvaluateNow(s);
      if (s.status.ok()) s.status = s.runner->Flush();
    });
  }
  for (auto& t : threads) t.join();
}

// The parameters of every site, concatenated.
std::vector<float> AllParams(std::vector<std::unique_ptr<SiteUnderTest>>& sites) {
  std::vector<float> all;
  for (auto& site : sites) {
    EXPECT_TRUE(site->status.ok()) << site->status;
    const std::vector<float> params = *site->stage->Params();
    all.insert(all.end(), params.begin(), params.end());
  }
  return all;
}

// Trains `spec` in one process, the reference, and expects the sites' parameters to be its bits.
std::unique_ptr<Trainer> ExpectTrainerBits(const JobSpec& spec,
                                           std::vector<std::unique_ptr<SiteUnderTest>>& sites) {
  auto trainer = *Trainer::Create(spec, *CreateCpuBackend(1, spec.training.precision));
  for (int64_t s = 0; s < spec.training.steps; ++s) EXPECT_TRUE(trainer->Step().ok());
  const std::vector<float> reference = *trainer->stage().Params();
  const std::vector<float> params = AllParams(sites);
  EXPECT_EQ(params.size(), reference.size());
  EXPECT_TRUE(params.size() == reference.size() &&
              std::memcmp(params.data(), reference.data(), 4 * params.size()) == 0);
  return trainer;
}

// Trains `spec` in one process as `strait train` does, evaluating after the same steps as the
// sites, and expects the last site's evaluations and losses to be its bits: the same figures after
// the same steps.
void ExpectTrainerEvaluations(const JobSpec& spec, const SiteUnderTest& last) {
  auto trainer = *Trainer::Create(spec, *CreateCpuBackend(1, spec.training.precision));
  const int64_t total = spec.training.steps;
  std::vector<double> losses;
  std::vector<StepEvaluation> expected;
  while (trainer->step() < total) {
    losses.push_back(trainer->Step()->loss);
    if (spec.training.EvaluatesAfter(trainer->step(), total)) {
      expected.push_back({trainer->step(), *trainer->Evaluate()});
    }
  }
  expected.push_back({total, *trainer->Evaluate()});
  EXPECT_EQ(last.losses, losses);
  ASSERT_EQ(last.evaluations.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(last.evaluations[i].step, expected[i].step) << i;
    EXPECT_EQ(last.evaluations[i].evaluation.loss, expected[i].evaluation.loss) << i;
    EXPECT_EQ(last.evaluations[i].evaluation.accuracy, expected[i].evaluation.accuracy) << i;
    EXPECT_EQ(last.evaluations[i].evaluation.bytes_per_token,
              expected[i].evaluation.bytes_per_token)
        << i;
  }
}

class SiteRunnerTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(SiteRunnerTest, ThreeSitesReproduceOneProcessBitForBit) {
  const JobSpec spec = Spec(std::get<0>(GetParam()), std::get<1>(GetParam()));
  FakeGateway gateway;
  FakeGateway::Link link(gateway);
  auto sites = Federation(spec, gateway, link);
  RunAll(sites, spec.training.steps);

  std::unique_ptr<Trainer> trainer = ExpectTrainerBits(spec, sites);
  ASSERT_TRUE(sites.back()->evaluation.has_value());
  EXPECT_EQ(sites.back()->evaluation->accuracy, trainer->Evaluate()->accuracy);
  EXPECT_EQ(sites.back()->evaluation->loss, trainer->Evaluate()->loss);
  EXPECT_FALSE(sites.front()->evaluation.has_value());
  EXPECT_EQ(gateway.stored(), 0u);  // Everything pushed was consumed and acknowledged.
  const SiteMetrics::Totals middle = sites[1]->metrics.Snapshot();
  EXPECT_EQ(middle.links.size(), 4u);  // Both boundaries, both directions.
  EXPECT_EQ(middle.rejected_frames, 0u);
}

// Eager updates are their own semantics: neither the deferred one-step-stale run nor a
// synchronous one (which the tests above could not tell apart if both sides ignored the option).
TEST(SiteRunnerEagerTest, TrainsDifferentBitsThanDeferredAndThanSynchronous) {
  auto params = [](const std::string& schedule) {
    JobSpec spec = Spec(schedule, "none");
    spec.training.grad_clip = 0.0;
    auto trainer = *Trainer::Create(spec, *CreateCpuBackend(1, spec.training.precision));
    for (int64_t s = 0; s < spec.training.steps; ++s) EXPECT_TRUE(trainer->Step().ok());
    return *trainer->stage().Params();
  };
  const std::vector<float> eager = params("2bw, update: eager");
  EXPECT_NE(eager, params("2bw, lookahead: 0"));
  EXPECT_NE(eager, params("1f1b"));
  EXPECT_NE(eager, params("2bw, update: eager, stale_gradients: drop"));
}

// Under eager updates the first step is not clipped (no norm before it) and each later step is
// clipped with the global norm of the step before.
TEST(SiteRunnerEagerTest, ClipsEachStepWithTheNormOfTheStepBefore) {
  JobSpec clipped = Spec("2bw, update: eager", "none"), plain = clipped;
  plain.training.grad_clip = 0.0;
  auto a = *Trainer::Create(clipped, *CreateCpuBackend(1, clipped.training.precision));
  auto b = *Trainer::Create(plain, *CreateCpuBackend(1, plain.training.precision));
  ASSERT_TRUE(a->Step().ok() && b->Step().ok());
  EXPECT_EQ(*a->stage().Params(), *b->stage().Params());
  const float first_scale = a->stage().lagged_clip_scale();  // From step 0's norm, for step 1.
  EXPECT_GT(first_scale, 0.0f);
  EXPECT_LT(first_scale, 1.0f);
  ASSERT_TRUE(a->Step().ok() && b->Step().ok());
  EXPECT_NE(*a->stage().Params(), *b->stage().Params());
}

// Only deferred 2bw's last step holds a drain: the update of its own gradient, which with
// clipping waits for the scale's trip down the chain (benchmarks leave it out of the steady state).
TEST(SiteRunnerDrainTest, OnlyDeferredTwoBwsFinalUpdateIsTheDrain) {
  for (const std::string schedule : {"2bw", "1f1b", "2bw, update: eager"}) {
    SCOPED_TRACE(schedule);
    const JobSpec spec = Spec(schedule, "none");
    FakeGateway gateway;
    FakeGateway::Link link(gateway);
    auto sites = Federation(spec, gateway, link);
    RunAll(sites, spec.training.steps);
    for (auto& site : sites) {
      ASSERT_TRUE(site->status.ok()) << site->status;
      ASSERT_EQ(site->drains.size(), static_cast<size_t>(spec.training.steps));
      for (size_t t = 0; t + 1 < site->drains.size(); ++t) EXPECT_EQ(site->drains[t], 0.0) << t;
      if (schedule == "2bw") {
        EXPECT_GT(site->drains.back(), 0.0);
      } else {
        EXPECT_EQ(site->drains.back(), 0.0);
      }
    }
  }
}

// training.eval_every: evaluations between steps through the pipeline (their frames between two
// steps' on every link, with clipping's frames around them) give `strait train`'s figures after
// the same steps, and training is the bits of a run that never evaluates: evaluating uses no data
// order, dropout mask or optimizer state.
class SiteRunnerEvalEveryTest
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(SiteRunnerEvalEveryTest, EvaluatesLikeOneProcessAndTrainsTheSameBits) {
  const JobSpec spec = Spec(std::get<0>(GetParam()), std::get<1>(GetParam()));
  ASSERT_GT(spec.training.eval_every, 0);
  FakeGateway gateway;
  FakeGateway::Link link(gateway);
  auto sites = Federation(spec, gateway, link);
  RunAll(sites, spec.training.steps);
  for (auto& site : sites) ASSERT_TRUE(site->status.ok()) << site->status;

  ExpectTrainerEvaluations(spec, *sites.back());
  EXPECT_GE(sites.back()->evaluations.size(), 2u);  // Between steps and the final one.
  JobSpec never = spec;
  never.training.eval_every = 0;
  ExpectTrainerBits(never, sites);
  EXPECT_TRUE(sites.front()->evaluations.empty());
  EXPECT_EQ(gateway.stored(), 0u);
}

INSTANTIATE_TEST_SUITE_P(SchedulesAndChains, SiteRunnerEvalEveryTest,
                         ::testing::Values(std::make_tuple("1f1b, eval_every: 2", "none"),
                                           std::make_tuple("gpipe, eval_every: 1", "shuffle+zstd"),
                                           std::make_tuple("1f1b, eval_every: 3, "
                                                           "extra_in_flight: 2",
                                                           "none")));

// 2bw holds microbatches across steps: a runner refuses to evaluate between its steps, before it
// sends or waits for anything.
TEST(SiteRunnerEvalEveryTest, TwoBwCannotEvaluateBetweenSteps) {
  const JobSpec spec = Spec("2bw", "none");
  FakeGateway gateway;
  FakeGateway::Link link(gateway);
  auto sites = Federation(spec, gateway, link);
  RunAll(sites, 2, /*end_of_run=*/false);
  for (auto& site : sites) {
    ASSERT_TRUE(site->status.ok()) << site->status;
    EXPECT_EQ(site->runner->Step(/*then_evaluate=*/true).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(site->runner->Evaluate().status().code(), absl::StatusCode::kFailedPrecondition);
  }
}

class SiteRunnerWorkersTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SiteRunnerWorkersTest, MixedWorkerCountsMatchOneWorkerUpToFloatOrder) {
  const JobSpec spec = Spec(GetParam(), "none");
  FakeGateway gateway;
  FakeGateway::Link link(gateway);
  auto one = Federation(spec, gateway, link);
  RunAll(one, spec.training.steps);
  auto mixed = Federation(spec, gateway, link, {1, 2, 1});
  RunAll(mixed, spec.training.steps);
  EXPECT_NE(AllParams(one), AllParams(mixed));  // The float order did change.
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_TRUE(one[i]->status.ok() && mixed[i]->status.ok()) << mixed[i]->status;
    const std::vector<float> a = *one[i]->stage->Params(), b = *mixed[i]->stage->Params();
    float scale = 0.0f, diff = 0.0f;
    for (size_t k = 0; k < a.size(); ++k) {
      scale = std::max(scale, std::abs(a[k]));
      diff = std::max(diff, std::abs(a[k] - b[k]));
    }
    EXPECT_LE(diff, 1e-5f * scale) << "site " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    SchedulesAndChains, SiteRunnerTest,
    ::testing::Values(std::make_tuple("1f1b", "none"), std::make_tuple("gpipe", "shuffle+zstd"),
                      std::make_tuple("2bw", "none"), std::make_tuple("2bw", "shuffle+zstd"),
                      std::make_tuple("2bw, lookahead: 0", "none"),
                      std::make_tuple("1f1b +cosine", "none"),
                      std::make_tuple("2bw +cosine", "none"),
                      // More microbatches in flight keep the bits.
                      std::make_tuple("1f1b, extra_in_flight: 2", "none"),
                      std::make_tuple("2bw, extra_in_flight: 2", "none"),
                      // Eager: the sites' stages use different weights for
                      // one microbatch, and strait train follows them.
                      std::make_tuple("2bw, update: eager", "none"),
                      std::make_tuple("2bw, update: eager, extra_in_flight: 1", "shuffle+zstd"),
                      // Dropped stale gradients: each site scales its own.
                      std::make_tuple("2bw, update: eager, stale_gradients: drop", "none"),
                      std::make_tuple("2bw, update: eager, stale_gradients: drop, "
                                      "extra_in_flight: 1",
                                      "shuffle+zstd")));
// A stage of one worker takes and gives its boundary tensors as the link codecs' value payloads,
// the path of a GPU site (StageWorkers::boundary_codecs: the backend quantizes, the host sees only
// the codec's bytes). On the CPU backend the federation then sends the same bytes and trains the
// same bits as with the codecs on the senders' threads, stochastic rounding included (a payload is
// quantized with the seed of its place in the link's order); topk, which no backend runs, stays on
// the host; lossless payloads give Trainer's bits.
class SiteRunnerPayloadTest
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(SiteRunnerPayloadTest, BackendPayloadsTrainTheBitsOfHostCodecs) {
  const JobSpec spec = Spec(std::get<0>(GetParam()), std::get<1>(GetParam()));
  FakeGateway gateway;
  FakeGateway::Link link(gateway);
  auto host = Federation(spec, gateway, link, {1, 1, 1}, 0, {}, BoundaryCodecs::kHost);
  RunAll(host, spec.training.steps);
  auto backend = Federation(spec, gateway, link, {1, 1, 1}, 0, {}, BoundaryCodecs::kBackend);
  RunAll(backend, spec.training.steps);
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_FALSE(host[i]->stage->boundary_payloads());
    EXPECT_TRUE(backend[i]->stage->boundary_payloads());
  }
  const std::vector<float> a = AllParams(host), b = AllParams(backend);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * a.size()), 0);
  ASSERT_TRUE(host.back()->evaluation && backend.back()->evaluation);
  EXPECT_EQ(host.back()->evaluation->loss, backend.back()->evaluation->loss);
  for (size_t i = 0; i < host.size(); ++i) {
    const SiteMetrics::Totals h = host[i]->metrics.Snapshot(), d = backend[i]->metrics.Snapshot();
    ASSERT_EQ(h.links.size(), d.links.size());
    for (size_t k = 0; k < h.links.size(); ++k) {
      EXPECT_EQ(h.links[k].raw_bytes(), d.links[k].raw_bytes()) << "site " << i << " link " << k;
      EXPECT_EQ(h.links[k].wire_bytes(), d.links[k].wire_bytes()) << "site " << i << " link " << k;
    }
  }
  if (std::get<1>(GetParam()) == "none") ExpectTrainerBits(spec, backend);
}

INSTANTIATE_TEST_SUITE_P(SchedulesAndChains, SiteRunnerPayloadTest,
                         ::testing::Values(std::make_tuple("1f1b", "none"),
                                           std::make_tuple("1f1b", "int8:sr+zstd"),
                                           std::make_tuple("2bw", "int4:sr+shuffle+zstd"),
                                           std::make_tuple("gpipe", "bf16+shuffle+zstd"),
                                           std::make_tuple("1f1b", "fp16"),
                                           std::make_tuple("1f1b", "topk:0.5+zstd")));

// The same on CUDA (skipped without a device): the codec kernels quantize where the activations
// live, in bf16 too, and the federation trains the bits of the one that copies f32 to the host.
TEST(SiteRunnerPayloadTest, CudaSitesEncodeOnTheDeviceTheFramesOfTheHost) {
  if (!CreateBackend(DeviceKind::kCuda, {}).ok()) GTEST_SKIP() << "no CUDA device";
  for (const char* precision : {"", ", precision: bf16"}) {
    SCOPED_TRACE(precision);
    const JobSpec spec = Spec(absl::StrCat("1f1b", precision), "int8:sr+zstd");
    FakeGateway gateway;
    FakeGateway::Link link(gateway);
    auto host =
        Federation(spec, gateway, link, {1, 1, 1}, 0, {}, BoundaryCodecs::kHost, DeviceKind::kCuda);
    RunAll(host, spec.training.steps);
    auto device =
        Federation(spec, gateway, link, {1, 1, 1}, 0, {}, BoundaryCodecs::kAuto, DeviceKind::kCuda);
    RunAll(device, spec.training.steps);
    EXPECT_TRUE(device[1]->stage->boundary_payloads());
    const std::vector<float> a = AllParams(host), b = AllParams(device);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 4 * a.size()), 0);
  }
}

TEST(SiteRunnerPayloadTest, OnlyAStageOfOneWorkerTakesPayloads) {
  const JobSpec spec = Spec("1f1b", "int8");
  FakeGateway gateway;
  FakeGateway::Link link(gateway);
  auto sites = Federation(spec, gateway, link, {1, 2, 1}, 0, {}, BoundaryCodecs::kBackend);
  EXPECT_TRUE(sites[0]->stage->boundary_payloads());
  EXPECT_FALSE(sites[1]->stage->boundary_payloads());
  const compression::StageSpec int8{.kind = compression::StageKind::kInt8};
  std::vector<uint8_t> payload;
  std::vector<float> x(4 * 12);
  EXPECT_EQ(sites[1]->stage->Forward(0, 0, 4, x.data(), BoundaryOut(int8, 0, &payload)).code(),
            absl::StatusCode::kFailedPrecondition);
  // CPU sites encode on the host unless told otherwise (the sender's thread overlaps it).
  auto automatic = Federation(spec, gateway, link);
  EXPECT_FALSE(automatic[0]->stage->boundary_payloads());
}

INSTANTIATE_TEST_SUITE_P(Schedules, SiteRunnerWorkersTest,
                         ::testing::Values("1f1b", "2bw",
                                           "2bw, update: eager, stale_gradients: drop"));

// A language model across three sites: what crosses each boundary is the residual stream, the
// first site reads the token windows and the last their next tokens; the final parameters and the
// evaluation are Trainer's bits. "tied": tie_embeddings, the first and the last site summing the
// shared matrix's gradients over their own link; "tied2": the same over two sites, on their one
// link.
class SiteRunnerGptTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SiteRunnerGptTest, ThreeSitesReproduceOneProcessBitForBit) {
  const std::string corpus =
      (std::filesystem::temp_directory_path() / "strait_runner_gpt_corpus.txt").string();
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 60; ++i) out << "And God said, Let there be light: and there was light.\n";
  }
  const std::vector<std::string> words = absl::StrSplit(GetParam(), ' ');
  const bool tied = words[0] == "tied" || words[0] == "tied2";
  const std::string sites_block = words[0] == "tied2" ? R"(
  - {id: a, layers: [0, 2]}
  - {id: c, layers: [2, 4]}
)"
                                                      : R"(
  - {id: a, layers: [0, 1]}
  - {id: b, layers: [1, 3]}
  - {id: c, layers: [3, 4]}
)";
  const std::string text = absl::StrCat(
      R"(name: runner-gpt
model: {family: gpt, context: 12, dim: 16, depth: 2, heads: 2, dropout: 0.1, init_seed: 4, )",
      "tie_embeddings: ", tied ? "true" : "false", R"(}
data: {path: )",
      corpus, R"(, seed: 2, validation: 0.05}
training: {steps: 5, global_batch: 8, microbatches: 4, schedule: )",
      tied ? GetParam().substr(words[0].size() + 1) : GetParam(), R"(,
           grad_clip: 1.0, optimizer: {name: adamw, lr: 0.01}}
sites:)",
      sites_block);
  absl::StatusOr<JobSpec> parsed = ParseJobSpec(text, "runner-gpt.yaml", "/");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const JobSpec& spec = *parsed;
  FakeGateway gateway;
  FakeGateway::Link link(gateway);
  auto sites = Federation(spec, gateway, link);
  RunAll(sites, spec.training.steps);

  std::unique_ptr<Trainer> trainer = ExpectTrainerBits(spec, sites);
  ASSERT_TRUE(sites.back()->evaluation.has_value());
  EXPECT_EQ(sites.back()->evaluation->loss, trainer->Evaluate()->loss);
  ExpectTrainerEvaluations(spec, *sites.back());  // With eval_every, after the same steps too.
  EXPECT_EQ(gateway.stored(), 0u);

  // The last site split over two workers: each takes its rows' [rows, context] labels, so only
  // the order of float sums changes. AdamW turns last-bit differences in near-zero gradients into
  // steps of up to lr (0.01), hence 6e-4 after 5 steps; labels off by a worker's offset give 0.09
  // and a validation loss 0.06 away (checked).
  auto split = Federation(
      spec, gateway, link,
      tied && spec.sites.size() == 2 ? std::vector<int>{1, 2} : std::vector<int>{1, 1, 2});
  RunAll(split, spec.training.steps);
  const std::vector<float> reference = *trainer->stage().Params(), params = AllParams(split);
  ASSERT_EQ(params.size(), reference.size());
  float scale = 0.0f, diff = 0.0f;
  for (size_t k = 0; k < params.size(); ++k) {
    scale = std::max(scale, std::abs(reference[k]));
    diff = std::max(diff, std::abs(params[k] - reference[k]));
  }
  EXPECT_LE(diff, 5e-3f * scale);
  EXPECT_NEAR(split.back()->evaluation->loss, trainer->Evaluate()->loss, 1e-4);
  std::filesystem::remove(corpus);
}

// Products of bf16-rounded inputs (training.precision), the same on every site; validation loss
// every 2 steps (also with the tied gradients on the one link between two sites, where the
// evaluation's frames travel between two steps' TIED frames).
INSTANTIATE_TEST_SUITE_P(Schedules, SiteRunnerGptTest,
                         ::testing::Values("1f1b", "2bw", "1f1b, precision: bf16", "tied 1f1b",
                                           "tied 2bw",
                                           "tied 2bw, update: eager, stale_gradients: drop",
                                           "tied2 1f1b", "1f1b, eval_every: 2",
                                           "tied2 1f1b, eval_every: 2"));

// A 2bw federation stopped between steps and resumed from the checkpoints its sites take then (the
// state right after the update that made L_k: SiteRunner::updates()) trains the same bits as an
// uninterrupted run. The stopped run's frames of the next step are left behind, as in a rollback.
class SiteRunnerTwoBwTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SiteRunnerTwoBwTest, ResumedFromCheckpointsEqualsUninterrupted) {
  const JobSpec spec = Spec(GetParam(), "none");
  const bool eager = spec.training.update == UpdateTiming::kEager;
  const std::string dir = ::testing::TempDir();
  std::vector<std::string> paths;
  int64_t at = -1;
  {
    FakeGateway gateway;
    FakeGateway::Link link(gateway);
    auto sites = Federation(spec, gateway, link);
    RunAll(sites, 4, /*end_of_run=*/false);
    for (size_t i = 0; i < sites.size(); ++i) {
      ASSERT_TRUE(sites[i]->status.ok()) << sites[i]->status;
      ASSERT_EQ(sites[i]->runner->step(), 4);
      at = sites[i]->runner->updates();
      ASSERT_EQ(at, eager ? 4 : 3);  // Deferred: step 3's gradient is still to be applied.
      // Eager: the first site's checkpoint carries the clipping scale of step 3's norm.
      if (eager && i == 0) {
        EXPECT_LT(sites[i]->stage->lagged_clip_scale(), 1.0f);
      }
      paths.push_back(dir + "/runner-2bw-" + std::to_string(i) + ".ckpt");
      ASSERT_TRUE(SaveStageCheckpoint(paths.back(), spec, *sites[i]->stage, at).ok());
    }
  }
  FakeGateway gateway;
  FakeGateway::Link link(gateway);
  auto resumed = Federation(spec, gateway, link, {1, 1, 1}, at, paths);
  RunAll(resumed, spec.training.steps);
  auto trainer = *Trainer::Create(spec, *CreateCpuBackend(1, spec.training.precision));
  for (int64_t s = 0; s < spec.training.steps; ++s) ASSERT_TRUE(trainer->Step().ok());
  const std::vector<float> reference = *trainer->stage().Params();
  const std::vector<float> params = AllParams(resumed);
  ASSERT_EQ(params.size(), reference.size());
  EXPECT_EQ(0, std::memcmp(params.data(), reference.data(), 4 * params.size()));
  EXPECT_EQ(resumed.back()->evaluation->accuracy, trainer->Evaluate()->accuracy);
  EXPECT_EQ(gateway.stored(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Updates, SiteRunnerTwoBwTest,
                         ::testing::Values("2bw", "2bw, update: eager, extra_in_flight: 1",
                                           "2bw, update: eager, stale_gradients: drop"));

TEST(SiteRunnerSecurityTest, AnAlteredFrameIsRefusedAndStopsTheConsumer) {
  const JobSpec spec = Spec("1f1b", "none");
  FakeGateway gateway;
  int pushed = 0;
  gateway.on_push = [&](ReceivedFrame& frame) {
    if (++pushed == 5) frame.body[frame.body.size() / 2] ^= 0x10;
  };
  FakeGateway::Link link(gateway);
  auto sites = Federation(spec, gateway, link);
  // The consumer of the altered frame stops; its neighbours would wait for it, so stop them too.
  std::thread watchdog([&] {
    for (int i = 0; i < 500; ++i) {
      for (auto& site : sites) {
        if (site->metrics.Snapshot().rejected_frames > 0) {
          for (auto& other : sites) other->runner->Abort(absl::AbortedError("test over"));
          return;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  RunAll(sites, spec.training.steps);
  watchdog.join();
  int refused = 0;
  for (auto& site : sites) {
    if (site->metrics.Snapshot().rejected_frames == 0) continue;
    ++refused;
    EXPECT_EQ(site->status.code(), absl::StatusCode::kDataLoss) << site->status;
    EXPECT_THAT(std::string(site->status.message()), ::testing::HasSubstr("refused frame"));
  }
  EXPECT_EQ(refused, 1);
}

TEST(FrameReceiverTest, AnnouncedFramesArePulledAtOnceWhileAnOlderOneIsAwaited) {
  FakeGateway gateway;
  FakeGateway::Link link(gateway);
  SiteMetrics metrics;
  std::unique_ptr<FrameReceiver> receiver = *FrameReceiver::Create(
      link, std::make_unique<FrameDecoder>(*crypto::Opener::Create(DirectionKey(0)), 1 << 20),
      {"dc-a", 0, v1::FORWARD}, metrics, /*window=*/3);
  // None of these frames ever arrives, so the receiver keeps waiting for the first; each
  // announcement is still pulled before Expect returns, up to the window.
  for (int step = 0; step < 4; ++step) {
    v1::TensorKey key;
    key.set_step(step);
    receiver->Expect(key, {1});
    EXPECT_EQ(gateway.pulls(), static_cast<size_t>(std::min(step + 1, 3)));
  }
  receiver->Stop(absl::CancelledError("test over"));
}

// A window or a send-ahead of no frames is a caller's mistake: refused with the value, not raised
// to one (DESIGN.md §9).
TEST(FrameReceiverTest, AWindowBelowOneIsRefusedWithItsValue) {
  FakeGateway gateway;
  FakeGateway::Link link(gateway);
  SiteMetrics metrics;
  for (int window : {0, -3}) {
    absl::StatusOr<std::unique_ptr<FrameReceiver>> receiver =
        FrameReceiver::Create(link, std::make_unique<FrameDecoder>(nullptr, 1 << 20),
                              {"dc-a", 0, v1::FORWARD}, metrics, window);
    EXPECT_EQ(receiver.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(receiver.status().message()),
                ::testing::EndsWith(absl::StrCat("window of at least 1 frame, got ", window)));
  }
}

TEST(FrameSenderTest, AMaxPendingBelowOneIsRefusedWithItsValue) {
  FakeGateway gateway;
  FakeGateway::Link link(gateway);
  SiteMetrics metrics;
  for (int max_pending : {0, -1}) {
    absl::StatusOr<std::unique_ptr<FrameSender>> sender = FrameSender::Create(
        link, *FrameEncoder::Create("none", nullptr), 0, v1::BACKWARD, metrics, max_pending);
    EXPECT_EQ(sender.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(sender.status().message()),
                ::testing::EndsWith(
                    absl::StrCat("max_pending of at least 1 frame in flight, got ", max_pending)));
  }
}

}  // namespace
}  // namespace strait::site
