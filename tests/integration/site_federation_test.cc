// Federated training end to end (issue #7): a real gateway and one strait-site process per site
// over mutual TLS on loopback, compared with `strait train` on the same job spec (an MLP on
// Fashion-MNIST, and a GPT on text).
//   Fidelity: lossless chains give parameters, optimizer state and per-step losses bit-identical to
//     the single process, with dropout and global-norm clipping on, for every schedule (2bw: the
//     stream across steps against `strait train`'s one-step-stale reference).
//   Lossy: int8+zstd forward / bf16 backward, and klt both ways, for a full epoch stay within 0.5
//   points of accuracy.
//   Security: a certificate of another CA cannot join; a frame altered inside the gateway is
//   refused
//     by the receiving site, counted, and stops it with a clear error.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "site/data/sentencepiece_api.h"
#include "site/data/token_shard_writer.h"
#include "site/data/tokenizer.h"
#include "site/data/tokenizer_trainer.h"
#include "site/rpc/tls_credentials.h"
#include "strait/v1/gateway.grpc.pb.h"
#include "tests/integration/federation_fixture.h"
#include "tools/model_checkpoints.h"
#include "tools/text_sampling.h"

namespace strait::testing {
namespace {

using std::chrono::seconds;

const std::vector<std::string> kSites = {"dc-a", "dc-b", "dc-c"};

struct JobOptions {
  std::string hidden = "[128, 128, 128]";
  std::string length = "steps: 50";
  int global_batch = 64;
  std::string schedule = "1f1b";
  std::string forward = "none", backward = "none";
  double dropout = 0.1;
  double grad_clip = 1.0;
  std::string layers[3] = {"[0, 1]", "[1, 3]", "[3, 4]"};
  int workers[3] = {1, 1, 1};
};

std::string JobYaml(const JobOptions& o) {
  return absl::StrReplaceAll(
      R"(name: fed-test
gateway: {memory_budget: 64MiB}
model: {family: mlp, input: 784, hidden: HIDDEN, classes: 10, dropout: DROPOUT, init_seed: 5}
data: {dataset: fashion-mnist, seed: 11}
training:
  LENGTH
  global_batch: BATCH
  microbatches: 4
  schedule: SCHEDULE
  grad_clip: CLIP
  optimizer: {name: adamw, lr: 0.001}
sites:
  - {id: dc-a, layers: L0, workers: W0}
  - {id: dc-b, layers: L1, workers: W1}
  - {id: dc-c, layers: L2, workers: W2}
links:
  - {between: [dc-a, dc-b], forward: FORWARD, backward: BACKWARD}
  - {between: [dc-b, dc-c], forward: FORWARD, backward: BACKWARD}
)",
      {{"HIDDEN", o.hidden},
       {"DROPOUT", absl::StrCat(o.dropout)},
       {"LENGTH", o.length},
       {"BATCH", absl::StrCat(o.global_batch)},
       {"SCHEDULE", o.schedule},
       {"CLIP", absl::StrCat(o.grad_clip)},
       {"L0", o.layers[0]},
       {"L1", o.layers[1]},
       {"L2", o.layers[2]},
       {"W0", absl::StrCat(o.workers[0])},
       {"W1", absl::StrCat(o.workers[1])},
       {"W2", absl::StrCat(o.workers[2])},
       {"FORWARD", o.forward},
       {"BACKWARD", o.backward}});
}

nlohmann::json Metrics(const std::string& dir) {
  return nlohmann::json::parse(harness::ReadFile(dir + "/metrics.json"), nullptr,
                               /*allow_exceptions=*/false);
}

// Trains the federation and the single-process reference; both must succeed.
void TrainBoth(BuildTreeFederation& fed,
               const std::vector<std::string>& site_args = {"--threads", "1"}) {
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  for (const std::string& site : kSites) fed.StartSite(site, site_args);
  ASSERT_EQ(fed.WaitSites(kSites, seconds(600)), absl::OkStatus());
  ASSERT_EQ(fed.RunReference({"--threads", "1"}, seconds(600)), 0)
      << harness::ReadFile(fed.dir().File("reference.log"));
}

class FidelityTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(FidelityTest, LosslessLinksTrainTheSameBitsAsOneProcess) {
  JobOptions o;
  o.forward = o.backward = std::get<0>(GetParam());
  o.schedule = std::get<1>(GetParam());
  BuildTreeFederation fed(JobYaml(o), kSites);
  TrainBoth(fed);
  if (HasFatalFailure()) return;

  ExpectSameStateAsReference(fed, kSites, 50);
  const nlohmann::json last = Metrics(fed.OutDir("dc-c")), single = Metrics(fed.ReferenceDir());
  ASSERT_TRUE(last.contains("loss")) << last.dump();
  EXPECT_EQ(last["loss"], single["loss"]);  // Every step's loss, exactly.
  EXPECT_EQ(last["test_accuracy"], single["test_accuracy"]);
  // The steady-state rate skips the first step's pipeline fill (for `strait bench e2e --wan`).
  EXPECT_GT(last.value("steady_samples_per_second", 0.0), 0) << last.dump();
}

INSTANTIATE_TEST_SUITE_P(
    Chains, FidelityTest,
    ::testing::Values(std::make_tuple("none", "1f1b"), std::make_tuple("zstd", "gpipe"),
                      std::make_tuple("shuffle+zstd", "1f1b"), std::make_tuple("none", "2bw")),
    [](const auto& info) {
      std::string name = absl::StrCat(std::get<0>(info.param), "_", std::get<1>(info.param));
      return absl::StrReplaceAll(name, {{"+", "_"}});
    });

// A language model across three processes (issue #28): the residual stream crosses the links, the
// first site reads token windows and the last their next tokens; every step's loss, the parameters,
// the optimizer state and the validation loss (every 4 steps with 1f1b, and at the end) are
// `strait train`'s bits, for 1f1b and 2bw, with byte tokens or a SentencePiece model (whose bytes
// per token the last site measures as `strait train` does), and with tied embeddings (the first and
// the last site summing the shared matrix's gradients over their own sealed link, its keys relayed
// by the gateway), and on token shards (`format: tokens`, memory-mapped). The sites' final
// checkpoints, assembled, are what `strait generate` samples from.
class GptFidelityTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GptFidelityTest, LosslessLinksTrainTheSameBitsAsOneProcess) {
  const bool sentencepiece = absl::EndsWith(GetParam(), "-sentencepiece");
  const bool tied = absl::EndsWith(GetParam(), "-tied");
  const bool tokens = absl::EndsWith(GetParam(), "-tokens");
  if (std::string error; sentencepiece && site::spm::OpenLibrary(&error) == nullptr) {
    GTEST_SKIP() << error;  // A sanitizer build cannot load SentencePiece (sentencepiece_api.h).
  }
  const std::string schedule = GetParam().substr(0, GetParam().find('-'));
  const std::string job =
      absl::StrReplaceAll(R"(name: gpt-fed-test
gateway: {memory_budget: 64MiB}
model: {family: gpt, vocab: VOCAB, context: 32, dim: 32, depth: 3, heads: 4, dropout: 0.1, init_seed: 5,
        tie_embeddings: TIE}
data: {DATA, tokenizer: TOKENIZER, validation: 0.05, seed: 11}
training:
  steps: 12
  global_batch: 16
  microbatches: 4
  schedule: SCHEDULE
  eval_every: EVAL_EVERY
  grad_clip: 1.0
  optimizer: {name: adamw, lr: 0.003}
  checkpoint: {every: 6}
sites:
  - {id: dc-a, layers: [0, 2]}
  - {id: dc-b, layers: [2, 4]}
  - {id: dc-c, layers: [4, 5]}
links:
  - {between: [dc-a, dc-b], forward: none, backward: none}
  - {between: [dc-b, dc-c], forward: none, backward: none}
)",
                          {{"SCHEDULE", schedule},
                           // 2bw cannot evaluate between steps.
                           {"EVAL_EVERY", schedule == "2bw" ? "0" : "4"},
                           {"VOCAB", sentencepiece ? "300" : "256"},
                           {"TIE", tied ? "true" : "false"},
                           {"DATA", tokens ? "format: tokens, path: shards" : "path: corpus.txt"},
                           {"TOKENIZER", sentencepiece ? "corpus.model" : "bytes"}});
  BuildTreeFederation fed(job, kSites);
  {
    std::ofstream corpus(fed.dir().File("corpus.txt"));
    for (int i = 0; i < (sentencepiece ? 300 : 100); ++i) {
      corpus << "  " << i % 31 + 1 << " And God said, Let there be light: and there was light.\n";
    }
  }
  if (tokens) {  // The same lines as token shards: ten documents, the last one held out.
    site::TokenShardOptions o;
    const std::string lines = harness::ReadFile(fed.dir().File("corpus.txt"));
    for (int d = 0, begin = 0; d < 10; ++d) {
      int end = begin;
      for (int line = 0; line < 10; ++line) end = static_cast<int>(lines.find('\n', end)) + 1;
      o.inputs.push_back(fed.dir().File("doc" + std::to_string(d) + ".txt"));
      std::ofstream(o.inputs.back()) << lines.substr(begin, end - begin);
      begin = end;
    }
    o.out = fed.dir().File("shards");
    o.shard_tokens = 1000;
    absl::StatusOr<site::TokenIndex> index =
        site::PrepareTokenShards(o, *site::MakeByteTokenizer(), nullptr);
    ASSERT_TRUE(index.ok()) << index.status();
  }
  if (sentencepiece) {
    site::TokenizerTrainOptions o;
    o.input = fed.dir().File("corpus.txt");
    o.out = fed.dir().File("corpus.model");
    o.vocab = 300;
    absl::StatusOr<site::TokenizerTrainResult> trained = site::TrainTokenizer(o);
    ASSERT_TRUE(trained.ok()) << trained.status();
  }
  TrainBoth(fed);
  if (HasFatalFailure()) return;

  ExpectSameStateAsReference(fed, kSites, 12);
  const nlohmann::json last = Metrics(fed.OutDir("dc-c")), single = Metrics(fed.ReferenceDir());
  EXPECT_EQ(last["loss"], single["loss"]);  // Every step's loss, in nats per token, exactly.
  EXPECT_EQ(last["val_loss"], single["val_loss"]);
  EXPECT_EQ(last["val_bits_per_byte"], single["val_bits_per_byte"]);
  EXPECT_EQ(last["val_bytes_per_token"], single["val_bytes_per_token"]);
  EXPECT_EQ(last["val_bytes_per_token"].get<double>() > 1.5, sentencepiece);
  // The validation figures during training (eval_every: after steps 4 and 8) and the final one.
  EXPECT_EQ(last["evaluations"], single["evaluations"]);
  EXPECT_EQ(last["evaluations"].size(), schedule == "2bw" ? 1u : 3u) << last["evaluations"];

  // The sites' final checkpoints assemble into the reference's whole model.
  absl::StatusOr<JobSpec> spec = LoadJobSpec(fed.config());
  ASSERT_TRUE(spec.ok()) << spec.status();
  absl::StatusOr<tools::ModelParams> assembled =
      tools::LoadModelParams(*spec, fed.dir().File("out"));
  ASSERT_TRUE(assembled.ok()) << assembled.status();
  EXPECT_EQ(assembled->sources.size(), 3u);
  EXPECT_EQ(assembled->step, 12);
  absl::StatusOr<site::CheckpointState> reference =
      site::ReadCheckpoint(fed.ReferenceDir() + "/final.ckpt");
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ(assembled->params, reference->params);
  // So do the coordinated checkpoints of the last step (checkpoint.dir/<site>/step-N.ckpt).
  absl::StatusOr<tools::ModelParams> coordinated =
      tools::LoadModelParams(*spec, spec->training.checkpoint.dir);
  ASSERT_TRUE(coordinated.ok()) << coordinated.status();
  EXPECT_EQ(coordinated->step, 12);
  EXPECT_EQ(coordinated->params, reference->params);
  absl::StatusOr<tools::TextSample> sample = tools::SampleFromCheckpoints(
      *spec, fed.dir().File("out"), "And God", 20, {.temperature = 0.0}, 1);
  ASSERT_TRUE(sample.ok()) << sample.status();
  // Byte tokens: 7 + 20 bytes; SentencePiece tokens: a byte or more each (12 steps of training
  // favour the space piece).
  if (sentencepiece) {
    EXPECT_GE(sample->text.size(), 27u) << sample->text;
  } else {
    EXPECT_EQ(sample->text.size(), 27u) << sample->text;
  }
  EXPECT_EQ(sample->text.rfind("And God", 0), 0u);
}

INSTANTIATE_TEST_SUITE_P(Schedules, GptFidelityTest,
                         ::testing::Values("1f1b", "2bw", "1f1b-sentencepiece", "2bw-tied",
                                           "1f1b-tokens"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return absl::StrReplaceAll(info.param, {{"-", "_"}});
                         });

// Trains the 3-site MLP for an epoch with `forward` / `backward` links; the accuracy stays within
// half a point of the lossless reference, and the forward sends `min_ratio` times fewer bytes.
// `twice`: a second federation trains the same, every step's loss exactly.
void LossyEpoch(const std::string& forward, const std::string& backward, double min_ratio,
                bool twice = false) {
  JobOptions o;
  o.hidden = "[256, 256]";
  o.layers[0] = "[0, 1]";
  o.layers[1] = "[1, 2]";
  o.layers[2] = "[2, 3]";
  o.length = "epochs: 1";
  o.global_batch = 128;
  o.dropout = 0.0;
  o.grad_clip = 0.0;
  o.forward = forward;
  o.backward = backward;
  BuildTreeFederation fed(JobYaml(o), kSites);
  TrainBoth(fed);  // The reference equals a lossless federation (FidelityTest).
  if (::testing::Test::HasFatalFailure()) return;
  const nlohmann::json lossy = Metrics(fed.OutDir("dc-c")), lossless = Metrics(fed.ReferenceDir());
  const double a = lossy["test_accuracy"], b = lossless["test_accuracy"];
  EXPECT_NEAR(a, b, 0.005) << "lossy " << a << " vs lossless " << b;
  EXPECT_GT(b, 0.75);  // It did learn.
  const nlohmann::json first = Metrics(fed.OutDir("dc-a"));
  for (const auto& link : first["links"]) {
    if (link["sent"] == true && link["direction"] == "forward") {
      const double ratio = link["raw_bytes"].get<double>() / link["wire_bytes"].get<double>();
      EXPECT_GT(ratio, min_ratio) << link.dump();
      std::printf("%s forward: %.2fx fewer bytes than fp32\n", forward.c_str(), ratio);
    }
  }
  if (!twice) return;
  BuildTreeFederation again(JobYaml(o), kSites);
  std::string error;
  ASSERT_TRUE(again.StartGateway({}, &error)) << error;
  for (const std::string& site : kSites) again.StartSite(site, {"--threads", "1"});
  ASSERT_EQ(again.WaitSites(kSites, seconds(600)), absl::OkStatus());
  const std::vector<double> losses = lossy["loss"],
                            repeated = Metrics(again.OutDir("dc-c"))["loss"];
  ASSERT_EQ(losses.size(), repeated.size());
  size_t differs = 0;  // The first step whose loss differs.
  while (differs < losses.size() && losses[differs] == repeated[differs]) ++differs;
  EXPECT_EQ(differs, losses.size()) << "the second run's loss differs from step " << differs << ": "
                                    << repeated[differs] << " against " << losses[differs];
}

TEST(LossyLinkTest, Int8ForwardBf16BackwardForAnEpochStaysWithinHalfAPoint) {
  LossyEpoch("int8+zstd", "bf16", 3.0);
}

// The link learns its basis (the first within a step, then a new one every 160 frames, each
// carried once) and codes in it; the forward's is shaped by the gradients its backward brings,
// those of the steps two before its own, so that a second run trains the same (however the
// gradients' frames arrive), and the backward's rounding noise is subtracted by its receiver.
TEST(LossyLinkTest, KltBothWaysForAnEpochStaysWithinHalfAPointAndTrainsTheSameTwice) {
  LossyEpoch("klt:0.1:fisher", "klt:1:dither",
             5.0,  // 6x: rows of 256, 32 a microbatch; a basis of 256^2
             /*twice=*/true);
}

TEST(MixedWorkersTest, OneTwoOneWorkersMatchOneProcessUpToFloatOrder) {
  JobOptions o;
  o.workers[1] = 2;
  BuildTreeFederation fed(JobYaml(o), kSites);
  TrainBoth(fed);
  if (HasFatalFailure()) return;
  const std::vector<double> relative = ExpectLikeReferenceUpToFloatOrder(fed, kSites);
  for (size_t i = 0; i < relative.size(); ++i) {
    EXPECT_GT(relative[i], 0.0) << kSites[i]
                                << ": the two-worker middle site should change some float sums";
  }
}

TEST(SecurityTest, ACertificateOfAnotherCaCannotJoin) {
  BuildTreeFederation fed(JobYaml({}), kSites);
  ASSERT_TRUE(harness::MakeCertificates(fed.dir().File("other"), {"dc-a"}, "other").ok());
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  const std::string other = fed.dir().File("other");
  fed.StartSite("dc-a", {"--cert", other + "/dc-a.pem", "--key", other + "/dc-a.key"});
  EXPECT_EQ(fed.WaitSite("dc-a", seconds(120)), 1) << fed.SiteLog("dc-a");
  EXPECT_THAT(fed.SiteLog("dc-a"), ::testing::HasSubstr("joining the gateway"));
}

// A site started with another step count than the run it would join is refused with the reason.
TEST(AgreementTest, ASiteThatWouldTrainAnotherNumberOfStepsCannotJoin) {
  BuildTreeFederation fed(JobYaml({}), kSites);
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  fed.StartSite("dc-a", {"--steps", "1000"});
  // dc-a joins first (else dc-a would be the one refused).
  for (int i = 0; i < 600 && !absl::StrContains(fed.gateway().LogTail(), "site dc-a joined"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  fed.StartSite("dc-b");
  EXPECT_EQ(fed.WaitSite("dc-b", seconds(120)), 1) << fed.SiteLog("dc-b");
  EXPECT_THAT(fed.SiteLog("dc-b"),
              ::testing::HasSubstr("site 'dc-a' of the run under way trains 1000: start every "
                                   "strait-site with the same --steps"));
}

TEST(SecurityTest, AFrameAlteredInTheGatewayIsRefusedCountedAndStopsTraining) {
  // The test gateway (tamper_gateway_main.cc): strait-gateway that flips a byte of the third frame.
  harness::Executables executables = harness::Executables::InBuildTree(STRAIT_BINARY_DIR);
  executables.gateway = STRAIT_TAMPER_GATEWAY;
  harness::LocalFederation fed(JobYaml({}), kSites, executables);
  std::string error;
  ASSERT_TRUE(fed.StartGateway({"--tamper-frame", "3"}, &error)) << error;
  for (const std::string& site : kSites) fed.StartSite(site);
  // Whichever site consumes the third frame stored must refuse it and stop; the others then wait
  // for it (recovery is the failure issue's), and the fixture stops them. WaitSites reports the
  // one that stopped without waiting for the others.
  const absl::Status stopped = fed.WaitSites(kSites, seconds(60));
  std::string refused_by;
  for (const std::string& site : kSites) {
    if (absl::StrContains(stopped.message(), "site " + site + " exited with code 1:")) {
      refused_by = site;
    }
  }
  ASSERT_FALSE(refused_by.empty()) << "no site refused the altered frame: " << stopped;
  const std::string log = fed.SiteLog(refused_by);
  EXPECT_THAT(log, ::testing::HasSubstr("refused frame"));
  EXPECT_THAT(log, ::testing::HasSubstr("authentication failed"));
  EXPECT_FALSE(std::filesystem::exists(fed.OutDir(refused_by) + "/final.ckpt"));
  const v1::FederationState state = GatewayState(fed);
  EXPECT_EQ(state.rejected_by_reason().count("site_rejected"), 1u) << state.DebugString();
  EXPECT_GE(state.rejected_frames(), 1u);
}

}  // namespace
}  // namespace strait::testing
