// Serving text through a federation (issue 46): three strait-site processes with `--serve`, each
// holding only its layers' weights, decode a client's request through the gateway over mutual TLS
// on loopback, and the text equals `strait generate` on the whole checkpoint token for token; a
// client whose certificate the job does not name is refused and counted.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/job_spec.h"
#include "site/rpc/federation_sampling.h"
#include "tests/integration/federation_fixture.h"
#include "tools/text_sampling.h"

namespace strait::testing {
namespace {

using std::chrono::seconds;

const std::vector<std::string> kSites = {"dc-a", "dc-b", "dc-c"};

const char kJob[] = R"(name: serve-test
gateway: {memory_budget: 64MiB}
model: {family: gpt, vocab: 256, context: 48, dim: 32, depth: 2, heads: 4, init_seed: 5}
data: {path: corpus.txt, tokenizer: bytes, validation: 0.1, seed: 11}
training:
  steps: 150
  global_batch: 16
  microbatches: 2
  optimizer: {name: adamw, lr: 0.01}
sites:
  - {id: dc-a, layers: [0, 2]}
  - {id: dc-b, layers: [2, 3]}
  - {id: dc-c, layers: [3, 4]}
serving: {clients: [alice]}
)";

class ServingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<std::string> certified = kSites;
    certified.push_back("alice");
    fed_ = std::make_unique<BuildTreeFederation>(kJob, certified);
    {
      std::ofstream corpus(fed_->dir().File("corpus.txt"));
      for (int i = 0; i < 200; ++i) {
        corpus << "  " << i % 31 + 1 << " And God said, Let there be light: and there was light.\n";
      }
    }
    // The model: `strait train`'s whole checkpoint; each site serves its layers of it.
    ASSERT_EQ(fed_->RunReference({"--threads", "1"}, seconds(600)), 0)
        << harness::ReadFile(fed_->dir().File("reference.log"));
    absl::StatusOr<JobSpec> spec = LoadJobSpec(fed_->config());
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
    std::string error;
    ASSERT_TRUE(fed_->StartGateway({}, &error)) << error;
    for (const std::string& site : kSites) {
      fed_->StartSite(site, {"--serve", "--checkpoint", fed_->ReferenceDir() + "/final.ckpt"});
    }
  }

  site::FederationClient Client(const std::string& id) const {
    const std::string certs = fed_->dir().File("certs") + "/";
    return {.id = id,
            .cert = certs + id + ".pem",
            .key = certs + id + ".key",
            .ca = certs + "ca.pem",
            .gateway = fed_->gateway_address()};
  }

  // Asks until the federation has started (the sites join after the gateway is up).
  absl::StatusOr<site::FederationSample> Ask(const std::string& id, const std::string& prompt,
                                             int tokens, const site::SamplingOptions& sampling) {
    for (int attempt = 0;; ++attempt) {
      absl::StatusOr<site::FederationSample> served =
          site::SampleFromFederation(spec_, Client(id), prompt, tokens, sampling);
      if (served.ok() || served.status().code() != absl::StatusCode::kFailedPrecondition ||
          attempt == 300) {
        return served;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  std::unique_ptr<BuildTreeFederation> fed_;
  JobSpec spec_;
};

TEST_F(ServingTest, GreedyTextEqualsStraitGenerateOnTheWholeCheckpoint) {
  for (const std::string& prompt : {std::string("And God"), std::string("  7 And God said, Let")}) {
    absl::StatusOr<site::FederationSample> served = Ask("alice", prompt, 20, {.temperature = 0});
    ASSERT_TRUE(served.ok()) << served.status() << "\n" << FederationLogs(*fed_, kSites);
    absl::StatusOr<tools::TextSample> local = tools::SampleFromCheckpoints(
        spec_, fed_->ReferenceDir(), prompt, 20, {.temperature = 0}, 1);
    ASSERT_TRUE(local.ok()) << local.status();
    EXPECT_EQ(served->text, local->text);
    EXPECT_EQ(served->tokens.size(), prompt.size() + 20);
    std::printf("served: %s (%.3f s)\n", served->text.c_str(), served->seconds);
  }
  // Sampled at a temperature: the same draws as `strait generate` with the same seed.
  const site::SamplingOptions warm{.temperature = 0.8, .top_k = 10, .seed = 3};
  absl::StatusOr<site::FederationSample> served = Ask("alice", "And", 30, warm);
  ASSERT_TRUE(served.ok()) << served.status();
  absl::StatusOr<tools::TextSample> local =
      tools::SampleFromCheckpoints(spec_, fed_->ReferenceDir(), "And", 30, warm, 1);
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(served->text, local->text);
  std::printf("served at temperature 0.8: %s\n", served->text.c_str());
  const v1::FederationState state = GatewayState(*fed_);
  EXPECT_EQ(state.serving().requests(), 3u);
  EXPECT_EQ(state.serving().tokens(), 70u);
}

// The command line: `strait generate --federation` prints what `strait generate --checkpoint`
// prints.
TEST_F(ServingTest, StraitGenerateFederationPrintsTheTextOfTheCheckpoint) {
  ASSERT_TRUE(Ask("alice", "And", 1, {.temperature = 0}).ok());  // Started.
  const std::string strait = STRAIT_BINARY_DIR "/tools/strait";
  const std::vector<std::string> common = {strait,          "generate", "--config", fed_->config(),
                                           "--prompt",      "And God",  "--tokens", "12",
                                           "--temperature", "0"};
  std::vector<std::string> served = common, local = common;
  served.insert(served.end(), {"--federation", "--gateway", fed_->gateway_address()});
  local.insert(local.end(), {"--checkpoint", fed_->ReferenceDir()});
  harness::Process asked(served, fed_->dir().File("served.txt"));
  ASSERT_EQ(asked.Wait(seconds(120)), 0) << harness::ReadFile(fed_->dir().File("served.txt"));
  harness::Process assembled(local, fed_->dir().File("local.txt"));
  ASSERT_EQ(assembled.Wait(seconds(120)), 0) << harness::ReadFile(fed_->dir().File("local.txt"));
  const std::string text = harness::ReadFile(fed_->dir().File("served.txt"));
  EXPECT_NE(text.find("served 12 tokens"), std::string::npos) << text;
  const std::string expected = harness::ReadFile(fed_->dir().File("local.txt"));
  const std::string line = expected.substr(expected.find("\nAnd God") + 1);
  EXPECT_NE(text.find(line), std::string::npos) << text << "\n---\n" << expected;
}

TEST_F(ServingTest, AClientTheJobDoesNotNameIsRefusedAndCounted) {
  // dc-a's certificate is the federation's, but dc-a is no client.
  absl::StatusOr<site::FederationSample> served = Ask("dc-a", "And God", 5, {.temperature = 0});
  ASSERT_FALSE(served.ok());
  EXPECT_EQ(served.status().code(), absl::StatusCode::kPermissionDenied) << served.status();
  EXPECT_NE(served.status().message().find("not one of the job's serving.clients"),
            std::string::npos)
      << served.status();
  const v1::FederationState state = GatewayState(*fed_);
  EXPECT_GE(state.rejected_by_reason().at("unauthorized_client"), 1u);
}

}  // namespace
}  // namespace strait::testing
