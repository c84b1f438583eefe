// `strait data prepare`: its help, the shards and index it writes and the summary it prints, a
// second run over the first, exit code 2 and a reason for bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "site/data/token_index.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

Result Strait(const std::string& args) {
  Result result;
  FILE* pipe =
      popen((std::string(STRAIT_BINARY_DIR) + "/tools/strait " + args + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), n);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

class DataCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("strait_data_cmd_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    for (int d = 0; d < 3; ++d) {
      std::ofstream(Path("doc" + std::to_string(d) + ".txt"))
          << std::string(1000 * (d + 1), static_cast<char>('a' + d));
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(DataCommandTest, HelpSaysWhatItWrites) {
  Result r = Strait("data prepare --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* expected : {"--input", "--tokenizer", "--out", "--shard-tokens", "--dtype",
                               "index.json", "one document", "format: tokens"}) {
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << " in\n" << r.output;
  }
  EXPECT_NE(Strait("--help").output.find("data"), std::string::npos);
}

TEST_F(DataCommandTest, WritesShardsAndIndexAndSaysHowToUseThem) {
  Result r =
      Strait("data prepare --input " + Path("doc0.txt") + " " + Path("doc1.txt") + " " +
             Path("doc2.txt") + " --tokenizer bytes --shard-tokens 2500 --out " + Path("shards"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("3 documents, 6000 tokens (uint16) in 3 shards"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("MB/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("data: {format: tokens, path: " + Path("shards") + ", tokenizer: bytes}"),
            std::string::npos)
      << r.output;
  absl::StatusOr<strait::site::TokenIndex> index = strait::site::ReadTokenIndex(Path("shards"));
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->shards.size(), 3u);
  EXPECT_EQ(fs::file_size(dir_ / "shards" / "shard-00002.bin"), 2000u);
  EXPECT_EQ(index->documents[2].offset, 3000);

  // uint32 on request; fewer shards: the third of the earlier run goes.
  r = Strait("data prepare --input " + Path("doc0.txt") + " " + Path("doc2.txt") +
             " --tokenizer bytes --dtype uint32 --out " + Path("shards"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(fs::file_size(dir_ / "shards" / "shard-00000.bin"), 16000u);
  EXPECT_FALSE(fs::exists(dir_ / "shards" / "shard-00001.bin"));
}

TEST_F(DataCommandTest, BadInputExitsWithTwoAndSaysWhy) {
  std::ofstream(Path("latin1.txt")) << "caf\xe9 au lait";
  Result r = Strait("data prepare --input " + Path("doc0.txt") + " " + Path("latin1.txt") +
                    " --tokenizer bytes --out " + Path("shards"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(Path("latin1.txt") + ": not UTF-8 text (byte 3 "), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "shards" / "index.json"));
  r = Strait("data prepare --input " + Path("missing.txt") + " --tokenizer bytes --out " +
             Path("shards"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("missing.txt"), std::string::npos) << r.output;
  r = Strait("data prepare --input " + Path("doc0.txt") + " --tokenizer " + Path("no.model") +
             " --out " + Path("shards"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no.model"), std::string::npos) << r.output;
  r = Strait("data prepare --input " + Path("doc0.txt") + " --tokenizer bytes --dtype int8 --out " +
             Path("shards"));
  EXPECT_NE(r.exit_code, 0) << r.output;
}

}  // namespace
