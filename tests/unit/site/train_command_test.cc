// `strait train` end to end on a tiny synthetic job: exit codes, metrics.json, a checkpoint that
// is bit-identical across two runs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

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

  int Run(const std::string& args) {
    const std::string cmd = std::string(STRAIT_BINARY_DIR) + "/tools/strait train " + args + " > " +
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
  ASSERT_EQ(Run("--config " + job + " --threads 2 --out " + (dir_ / "a").string()), 0)
      << Read(dir_ / "log");
  EXPECT_NE(Read(dir_ / "log").find("test accuracy"), std::string::npos);
  const nlohmann::json metrics = nlohmann::json::parse(Read(dir_ / "a" / "metrics.json"));
  EXPECT_EQ(metrics["loss"].size(), 6u);
  EXPECT_GE(metrics["test_accuracy"].get<double>(), 0.0);
  EXPECT_GT(metrics["samples_per_second"].get<double>(), 0.0);

  ASSERT_EQ(Run("--config " + job + " --threads 2 --steps 6 --out " + (dir_ / "b").string()), 0);
  const std::string a = Read(dir_ / "a" / "final.ckpt"), b = Read(dir_ / "b" / "final.ckpt");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, b);
}

TEST_F(TrainCommandTest, ExitCodes) {
  EXPECT_EQ(Run("--config " + (dir_ / "missing.yaml").string()), 2);
  EXPECT_NE(Run("--config " + (dir_ / "job.yaml").string() + " --device tpu"), 0);
}

}  // namespace
