// The Env contract (core/env.h), on the local disk (Env::Default) and on the tests' MemEnv: the
// same behaviour, so that code tested on MemEnv behaves so on the disk.
#include "core/env.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>

#include "tests/unit/core/mem_env.h"

namespace strait {
namespace {

class EnvTest : public ::testing::TestWithParam<bool> {
 protected:
  EnvTest() {
    if (GetParam()) {
      env_ = Env::Default();
      dir_ =
          std::filesystem::temp_directory_path() / ("strait-env-test-" + std::to_string(getpid()));
      std::filesystem::remove_all(dir_);
    } else {
      mem_ = std::make_unique<testing::MemEnv>();
      env_ = mem_.get();
      dir_ = "/mem";
    }
  }
  ~EnvTest() override {
    if (GetParam()) std::filesystem::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  Env* env_ = nullptr;
  std::unique_ptr<testing::MemEnv> mem_;
  std::filesystem::path dir_;
};

TEST_P(EnvTest, WritesReadsRenamesAndRemovesWholeFiles) {
  EXPECT_EQ(env_->ReadFile(Path("a")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(env_->FileExists(Path("a")));
  ASSERT_TRUE(env_->WriteFileAtomically(Path("a"), std::string("one\0two", 7)).ok());
  EXPECT_EQ(*env_->ReadFile(Path("a")), std::string("one\0two", 7));
  ASSERT_TRUE(env_->WriteFileAtomically(Path("a"), "three").ok());  // replaces
  EXPECT_EQ(*env_->ReadFile(Path("a")), "three");
  ASSERT_TRUE(env_->WriteFileAtomically(Path("b"), "").ok());
  EXPECT_EQ(*env_->ListFiles(dir_.string()), (std::vector<std::string>{"a", "b"}));
  ASSERT_TRUE(env_->RenameFile(Path("a"), Path("b")).ok());
  EXPECT_FALSE(env_->FileExists(Path("a")));
  EXPECT_EQ(*env_->ReadFile(Path("b")), "three");
  EXPECT_EQ(env_->RenameFile(Path("a"), Path("c")).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(env_->RemoveFile(Path("b")).ok());
  ASSERT_TRUE(env_->RemoveFile(Path("b")).ok());  // missing: fine
  EXPECT_TRUE(env_->ListFiles(dir_.string())->empty());
  EXPECT_TRUE(env_->ListFiles(Path("nowhere"))->empty());
}

TEST_P(EnvTest, TheClockMovesForward) {
  const Env::Clock::time_point before = env_->Now();
  env_->SleepFor(std::chrono::milliseconds(2));
  EXPECT_GE(env_->Now() - before, std::chrono::milliseconds(2));
}

INSTANTIATE_TEST_SUITE_P(DiskAndMemory, EnvTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Disk" : "Memory"; });

TEST(MemEnvTest, WritesFailOnRequestAndTheClockStandsStill) {
  testing::MemEnv env;
  const Env::Clock::time_point t0 = env.Now();
  EXPECT_EQ(env.Now(), t0);
  env.FailWritesUnder("/full/");
  EXPECT_FALSE(env.WriteFileAtomically("/full/x", "data").ok());
  EXPECT_TRUE(env.WriteFileAtomically("/other/x", "data").ok());
  EXPECT_EQ(env.writes(), 1);
}

}  // namespace
}  // namespace strait
