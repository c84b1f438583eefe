// `strait train` end to end on a tiny synthetic job: exit codes, metrics.json, a checkpoint that
// is bit-identical across two runs; and on a tiny language model whose checkpoint `strait generate`
// samples from, with the errors a user meets (text that is not UTF-8, no checkpoint); and the same
// with a SentencePiece tokenizer trained by `strait tokenizer train`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "site/data/sentencepiece_api.h"
#include "site/data/tokenizer.h"

namespace {

namespace fs = std::filesystem;

constexpr char kJob[] = R"(name: smoke
model: {family: mlp, input: 16, hidden: [12, 8], classes: 3}
data: {dataset: synthetic, train_size: 256, test_size: 64, seed: 3}
training:
  steps: 6
  global_batch: 32
  microbatches: 2
  optimizer: {name: adamw, lr: 0.01}
sites:
  - {id: a, layers: [0, 1]}
  - {id: b, layers: [1, 3]}
links:
  - {between: [a, b]}
)";

class TrainCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strait_train_cmd_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "job.yaml") << kJob;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `strait <args>` (stdout and stderr to dir_/log); returns its exit code.
  int Strait(const std::string& args) {
    const std::string cmd = std::string(STRAIT_BINARY_DIR) + "/tools/strait " + args + " > " +
                            (dir_ / "log").string() + " 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  static std::string Read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  fs::path dir_;
};

TEST_F(TrainCommandTest, WritesMetricsAndDeterministicCheckpoint) {
  const std::string job = (dir_ / "job.yaml").string();
  ASSERT_EQ(Strait("train --config " + job + " --threads 2 --out " + (dir_ / "a").string()), 0)
      << Read(dir_ / "log");
  EXPECT_NE(Read(dir_ / "log").find("test accuracy"), std::string::npos);
  const nlohmann::json metrics = nlohmann::json::parse(Read(dir_ / "a" / "metrics.json"));
  EXPECT_EQ(metrics["loss"].size(), 6u);
  EXPECT_GE(metrics["test_accuracy"].get<double>(), 0.0);
  EXPECT_GT(metrics["samples_per_second"].get<double>(), 0.0);

  ASSERT_EQ(
      Strait("train --config " + job + " --threads 2 --steps 6 --out " + (dir_ / "b").string()), 0);
  const std::string a = Read(dir_ / "a" / "final.ckpt"), b = Read(dir_ / "b" / "final.ckpt");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
}

// training.eval_every: held-out figures after every 2 steps, printed and in metrics.json's
// "evaluations" with the final one; training is the bits of a run that does not evaluate.
TEST_F(TrainCommandTest, EvaluatesEveryNStepsWithoutChangingTraining) {
  std::string every = kJob;
  every.replace(every.find("  microbatches: 2\n"), 0, "  eval_every: 2\n");
  std::ofstream(dir_ / "every.yaml") << every;
  const std::string job = (dir_ / "job.yaml").string(), out = (dir_ / "every").string();
  ASSERT_EQ(
      Strait("train --config " + (dir_ / "every.yaml").string() + " --threads 2 --out " + out), 0)
      << Read(dir_ / "log");
  const std::string log = Read(dir_ / "log");
  EXPECT_NE(log.find("step 2: test accuracy "), std::string::npos) << log;
  EXPECT_NE(log.find("step 4: test accuracy "), std::string::npos) << log;
  EXPECT_EQ(log.find("step 6: "), std::string::npos) << log;  // The final line says it.
  const nlohmann::json metrics = nlohmann::json::parse(Read(dir_ / "every" / "metrics.json"));
  const nlohmann::json& evaluations = metrics["evaluations"];
  ASSERT_EQ(evaluations.size(), 3u) << metrics.dump();
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(evaluations[i]["step"], 2 * (i + 1));
    EXPECT_TRUE(evaluations[i].contains("loss") && evaluations[i].contains("test_accuracy"));
  }
  EXPECT_EQ(evaluations[2]["test_accuracy"], metrics["test_accuracy"]);

  ASSERT_EQ(Strait("train --config " + job + " --threads 2 --out " + (dir_ / "never").string()), 0);
  const nlohmann::json never = nlohmann::json::parse(Read(dir_ / "never" / "metrics.json"));
  EXPECT_EQ(metrics["loss"], never["loss"]);
  EXPECT_EQ(never["evaluations"].size(), 1u);  // The final one.
  EXPECT_EQ(Read(dir_ / "every" / "final.ckpt"), Read(dir_ / "never" / "final.ckpt"));
}

TEST_F(TrainCommandTest, ExitCodes) {
  EXPECT_EQ(Strait("train --config " + (dir_ / "missing.yaml").string()), 2);
  EXPECT_NE(Strait("train --config " + (dir_ / "job.yaml").string() + " --device tpu"), 0);
}

// What the two language-model jobs share: training and a split over two sites.
constexpr char kLmTrainingAndSites[] = R"(training:
  steps: 80
  global_batch: 16
  microbatches: 2
  optimizer: {name: adamw, lr: 0.01}
sites:
  - {id: a, layers: [0, 2]}
  - {id: b, layers: [2, 4]}
)";

const std::string kGptJob = std::string(R"(name: tiny-lm
model: {family: gpt, context: 16, dim: 32, depth: 2, heads: 4}
data: {path: corpus.txt, validation: 0.1}
)") + kLmTrainingAndSites;

TEST_F(TrainCommandTest, AGptTrainsOnTextAndGenerateContinuesIt) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  std::ofstream(dir_ / "corpus.txt") << text;
  std::ofstream(dir_ / "lm.yaml") << kGptJob;
  const std::string job = (dir_ / "lm.yaml").string(), out = (dir_ / "lm").string();
  ASSERT_EQ(Strait("train --config " + job + " --threads 2 --out " + out), 0) << Read(dir_ / "log");
  EXPECT_NE(Read(dir_ / "log").find("bits/byte"), std::string::npos) << Read(dir_ / "log");
  const nlohmann::json metrics = nlohmann::json::parse(Read(dir_ / "lm" / "metrics.json"));
  EXPECT_LT(metrics["val_loss"].get<double>(), 1.0);
  EXPECT_NEAR(metrics["val_bits_per_byte"].get<double>(),
              metrics["val_loss"].get<double>() / std::log(2.0), 1e-9);

  ASSERT_EQ(Strait("generate --config " + job + " --checkpoint " + out +
                   " --prompt 'the quick brown ' --tokens 12 --temperature 0"),
            0)
      << Read(dir_ / "log");
  EXPECT_NE(Read(dir_ / "log").find("the quick brown fox jumps ov"), std::string::npos)
      << Read(dir_ / "log");
  // Sampling is seeded: the same seed gives the same text.
  ASSERT_EQ(Strait("generate -c " + job + " --checkpoint " + out + " --tokens 40 --seed 3"), 0);
  const std::string first = Read(dir_ / "log");
  ASSERT_EQ(Strait("generate -c " + job + " --checkpoint " + out + " --tokens 40 --seed 3"), 0);
  EXPECT_EQ(Read(dir_ / "log"), first);

  // No checkpoint there: exit 1 and a message that says what it looked for.
  EXPECT_EQ(Strait("generate -c " + job + " --checkpoint " + dir_.string()), 1);
  EXPECT_NE(Read(dir_ / "log").find("holds no checkpoint of this model"), std::string::npos)
      << Read(dir_ / "log");
  // A classifier's job spec: exit 2.
  EXPECT_EQ(Strait("generate -c " + (dir_ / "job.yaml").string() + " --checkpoint " + out), 2);
  // A longer context than the checkpoint's position table: exit 1, naming the file and the fix.
  std::string longer = kGptJob;
  longer.replace(longer.find("context: 16"), 11, "context: 32");
  std::ofstream(dir_ / "lm32.yaml") << longer;
  EXPECT_EQ(Strait("generate -c " + (dir_ / "lm32.yaml").string() + " --checkpoint " + out), 1);
  EXPECT_NE(Read(dir_ / "log")
                .find("model.context 32 is longer than the position table of " + out +
                      "/final.ckpt (16 positions"),
            std::string::npos)
      << Read(dir_ / "log");
}

const std::string kSentencePieceJob = std::string(R"(name: tiny-spm
model: {family: gpt, vocab: 400, context: 12, dim: 32, depth: 2, heads: 4}
data: {path: corpus.txt, tokenizer: models/corpus.model, validation: 0.1}
)") + kLmTrainingAndSites;

// Lines of a few pangrams, numbered: enough pieces for a 400-token BPE.
std::string PangramLines() {
  const char* sentences[] = {
      "the quick brown fox jumps over the lazy dog.", "pack my box with five dozen liquor jugs;",
      "how vexingly quick daft zebras jump!", "sphinx of black quartz, judge my vow."};
  std::string text;
  for (int i = 0; i < 400; ++i) text += std::to_string(i) + " " + sentences[i % 4] + "\n";
  return text;
}

TEST_F(TrainCommandTest, AGptTrainsOnSentencePieceTokensAndGenerateDecodesThem) {
  std::string error;  // A sanitizer build cannot load SentencePiece (sentencepiece_api.h).
  if (strait::site::spm::OpenLibrary(&error) == nullptr) GTEST_SKIP() << error;
  const std::string text = PangramLines();
  std::ofstream(dir_ / "corpus.txt") << text;
  fs::create_directories(dir_ / "models");
  const std::string model = (dir_ / "models" / "corpus.model").string();
  ASSERT_EQ(Strait("tokenizer train --input " + (dir_ / "corpus.txt").string() +
                   " --vocab 400 --threads 2 --out " + model),
            0)
      << Read(dir_ / "log");
  EXPECT_NE(Read(dir_ / "log").find("bytes/token"), std::string::npos) << Read(dir_ / "log");
  std::ofstream(dir_ / "spm.yaml") << kSentencePieceJob;
  const std::string job = (dir_ / "spm.yaml").string(), out = (dir_ / "spm").string();
  ASSERT_EQ(Strait("train --config " + job + " --threads 2 --out " + out), 0) << Read(dir_ / "log");
  EXPECT_NE(Read(dir_ / "log").find("bytes/token)"), std::string::npos) << Read(dir_ / "log");

  // Bytes per token of the validation labels, measured here: the tail's tokens decoded.
  absl::StatusOr<std::unique_ptr<strait::site::Tokenizer>> tokenizer =
      strait::site::LoadSentencePieceTokenizer(model);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<int32_t> ids = *(*tokenizer)->Encode(text);
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t cut = n - std::llround(static_cast<double>(n) * 0.1);
  const int64_t labels = (n - cut - 1) / 12 * 12;
  const std::string decoded =
      *(*tokenizer)
           ->Decode(std::vector<int32_t>(ids.begin() + cut + 1, ids.begin() + cut + 1 + labels));
  const double bytes_per_token = static_cast<double>(decoded.size()) / static_cast<double>(labels);
  EXPECT_GT(bytes_per_token, 2.0);

  const nlohmann::json metrics = nlohmann::json::parse(Read(dir_ / "spm" / "metrics.json"));
  EXPECT_NEAR(metrics["val_bytes_per_token"].get<double>(), bytes_per_token, 1e-12);
  EXPECT_NEAR(metrics["val_bits_per_byte"].get<double>(),
              metrics["val_loss"].get<double>() / bytes_per_token / std::log(2.0), 1e-9);
  EXPECT_LT(metrics["val_loss"].get<double>(), 2.0);

  ASSERT_EQ(Strait("generate --config " + job + " --checkpoint " + out +
                   " --prompt '13 pack my box' --tokens 6 --temperature 0"),
            0)
      << Read(dir_ / "log");
  EXPECT_NE(Read(dir_ / "log").find("13 pack my box with five dozen"), std::string::npos)
      << Read(dir_ / "log");

  // A job spec whose model.vocab is not the tokenizer's: refused, naming the file and the fix.
  std::string other = kSentencePieceJob;
  other.replace(other.find("vocab: 400"), 10, "vocab: 512");
  std::ofstream(dir_ / "other.yaml") << other;
  const std::string other_job = (dir_ / "other.yaml").string();
  EXPECT_EQ(Strait("train --config " + other_job + " --out " + (dir_ / "x").string()), 1);
  EXPECT_NE(Read(dir_ / "log")
                .find(model + ": the tokenizer has a vocabulary of 400 tokens but "
                              "model.vocab is 512; set model.vocab: 400"),
            std::string::npos)
      << Read(dir_ / "log");
  EXPECT_EQ(Strait("generate -c " + other_job + " --checkpoint " + out), 2);
  EXPECT_NE(Read(dir_ / "log").find("set model.vocab: 400"), std::string::npos)
      << Read(dir_ / "log");
  EXPECT_EQ(Strait("config check " + other_job), 2);
  EXPECT_NE(Read(dir_ / "log").find("set model.vocab: 400"), std::string::npos)
      << Read(dir_ / "log");
  // No model file: what to run to make one.
  fs::remove(model);
  EXPECT_EQ(Strait("train --config " + job + " --out " + (dir_ / "x").string()), 1);
  EXPECT_NE(Read(dir_ / "log").find(model + ": cannot open the tokenizer model"), std::string::npos)
      << Read(dir_ / "log");
}

// The same text as token shards (`strait data prepare`, three documents, the last exactly the
// held-out tenth): `strait train` gives the bits it gives on the text file.
TEST_F(TrainCommandTest, TokenShardsTrainTheBitsOfTheSameText) {
  const std::string sentence = "the quick brown fox jumps over the lazy dog. ";
  std::string text;
  std::vector<std::string> docs(3);
  for (int i = 0; i < 200; ++i) {
    text += sentence;
    docs[i < 90 ? 0 : i < 180 ? 1 : 2] += sentence;
  }
  std::ofstream(dir_ / "corpus.txt") << text;
  std::string inputs;
  for (int d = 0; d < 3; ++d) {
    const fs::path path = dir_ / ("doc" + std::to_string(d) + ".txt");
    std::ofstream(path) << docs[d];
    inputs += " " + path.string();
  }
  ASSERT_EQ(Strait("data prepare --tokenizer bytes --out " + (dir_ / "shards").string() +
                   " --shard-tokens 1000 --input" + inputs),
            0)
      << Read(dir_ / "log");
  std::ofstream(dir_ / "lm.yaml") << kGptJob;
  std::string tokens_job = kGptJob;
  tokens_job.replace(tokens_job.find("path: corpus.txt"), 16, "format: tokens, path: shards");
  std::ofstream(dir_ / "tokens.yaml") << tokens_job;
  ASSERT_EQ(Strait("train --config " + (dir_ / "lm.yaml").string() +
                   " --threads 2 --steps 20 --out " + (dir_ / "text").string()),
            0)
      << Read(dir_ / "log");
  ASSERT_EQ(Strait("train --config " + (dir_ / "tokens.yaml").string() +
                   " --threads 2 --steps 20 --out " + (dir_ / "tokens").string()),
            0)
      << Read(dir_ / "log");
  EXPECT_FALSE(Read(dir_ / "text" / "final.ckpt").empty());
  EXPECT_EQ(Read(dir_ / "tokens" / "final.ckpt"), Read(dir_ / "text" / "final.ckpt"));
  const nlohmann::json a = nlohmann::json::parse(Read(dir_ / "text" / "metrics.json"));
  const nlohmann::json b = nlohmann::json::parse(Read(dir_ / "tokens" / "metrics.json"));
  EXPECT_EQ(a["loss"], b["loss"]);
  EXPECT_EQ(a["val_loss"], b["val_loss"]);
  EXPECT_EQ(b["loss"].size(), 20u);
}

TEST_F(TrainCommandTest, TextThatIsNotUtf8IsRefusedWithItsFileName) {
  std::ofstream(dir_ / "corpus.txt") << std::string(300, 'a') + "\xff" + std::string(300, 'b');
  std::ofstream(dir_ / "lm.yaml") << kGptJob;
  EXPECT_EQ(
      Strait("train --config " + (dir_ / "lm.yaml").string() + " --out " + (dir_ / "lm").string()),
      1);
  EXPECT_NE(Read(dir_ / "log").find("corpus.txt: not UTF-8 text (byte 300"), std::string::npos)
      << Read(dir_ / "log");
}

}  // namespace
