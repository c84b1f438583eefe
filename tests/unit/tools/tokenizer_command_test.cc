// `strait tokenizer train`: its help, the summary and the file it writes, exit code 2 and a reason
// for bad arguments and bad input; and `strait config check` of a job spec with a tokenizer model.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "site/data/sentencepiece_api.h"

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
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

class TokenizerCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A sanitizer build cannot load SentencePiece (sentencepiece_api.h says why).
    std::string error;
    if (strait::site::spm::OpenLibrary(&error) == nullptr) GTEST_SKIP() << error;
    dir_ = fs::temp_directory_path() / ("strait_tokenizer_cmd_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::string text;
    for (int i = 0; i < 300; ++i) {
      text += std::to_string(i) + " In the beginning God created the heaven and the earth.\n";
      text += "And the earth was without form, and void; and darkness was upon the deep.\n";
    }
    std::ofstream(dir_ / "text.txt") << text;
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(TokenizerCommandTest, HelpSaysWhatItWrites) {
  Result r = Strait("tokenizer train --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* expected : {"Usage", "--input", "--vocab", "--out", "--type", "bpe or unigram",
                               "--character-coverage", "--verbose", "exactly --out"}) {
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << " in\n" << r.output;
  }
  r = Strait("--help");
  EXPECT_NE(r.output.find("tokenizer"), std::string::npos) << r.output;
}

TEST_F(TokenizerCommandTest, TrainsAModelAndSaysHowToUseIt) {
  Result r = Strait("tokenizer train --input " + Path("text.txt") + " --vocab 320 --type unigram" +
                    " --out " + Path("t.model"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "t.model"));
  EXPECT_FALSE(fs::exists(dir_ / "t.model.tmp"));
  EXPECT_FALSE(fs::exists(dir_ / "t.vocab"));
  EXPECT_FALSE(fs::exists(dir_ / "t.model.vocab"));
  for (const std::string& expected :
       {"wrote " + Path("t.model") + ": SentencePiece unigram, vocabulary 320",
        std::string("bytes/token"),
        "use it: data: {tokenizer: " + Path("t.model") + "}, model: {vocab: 320}"}) {
    EXPECT_NE(r.output.find(expected), std::string::npos) << expected << " in\n" << r.output;
  }
  // Quiet: SentencePiece's own log only with --verbose.
  EXPECT_EQ(r.output.find("trainer_interface"), std::string::npos) << r.output;
  r = Strait("tokenizer train --input " + Path("text.txt") + " --vocab 320 --verbose --out " +
             Path("v.model"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("trainer_interface"), std::string::npos) << r.output;
}

TEST_F(TokenizerCommandTest, BadArgumentsAndInputExitTwoWithAReason) {
  const std::string out = " --out " + Path("m.model");
  struct Case {
    std::string args, expected;
  };
  std::ofstream(dir_ / "latin1.txt") << "caf\xe9 au lait\n";
  for (const Case& c : {
           Case{"tokenizer", "A subcommand is required"},
           Case{"tokenizer train --vocab 300" + out, "--input is required"},
           Case{"tokenizer train --input " + Path("text.txt") + out, "--vocab is required"},
           Case{"tokenizer train --input " + Path("text.txt") + " --vocab 300",
                "--out is required"},
           Case{"tokenizer train --input " + Path("text.txt") + " --vocab 10" + out, "--vocab"},
           Case{"tokenizer train --input " + Path("text.txt") + " --vocab 300 --type word" + out,
                "--type"},
           Case{"tokenizer train --input " + Path("missing.txt") + " --vocab 300" + out,
                Path("missing.txt") + ": cannot open the text file (--input)"},
           Case{"tokenizer train --input " + Path("latin1.txt") + " --vocab 300" + out,
                Path("latin1.txt") + ": not UTF-8 text (byte 3"},
           Case{"tokenizer train --input " + Path("text.txt") + " --vocab 5000" + out,
                "--vocab 5000 is more than this text yields"},
       }) {
    Result r = Strait(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(dir_ / "m.model"));
}

TEST_F(TokenizerCommandTest, ConfigCheckReadsTheModelWhereItIs) {
  const std::string job = R"(name: lm
model: {family: gpt, vocab: 300, context: 16, dim: 32, depth: 2, heads: 4}
data: {path: text.txt, tokenizer: t.model}
training: {steps: 3}
sites: [{id: a, layers: [0, 4]}]
)";
  std::ofstream(dir_ / "job.yaml") << job;
  // Not here (a gateway's machine): OK, with a note.
  Result r = Strait("config check " + Path("job.yaml"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tokenizer " + Path("t.model")), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not checked here"), std::string::npos) << r.output;
  auto train_vocab = [&](int vocab) {
    return Strait(absl::StrCat("tokenizer train --input ", Path("text.txt"), " --vocab ", vocab,
                               " --out ", Path("t.model")))
        .exit_code;
  };
  ASSERT_EQ(train_vocab(300), 0);
  r = Strait("config check " + Path("job.yaml"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("not checked here"), std::string::npos) << r.output;
  ASSERT_EQ(train_vocab(310), 0);
  r = Strait("config check " + Path("job.yaml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(Path("t.model") + ": the tokenizer has a vocabulary of 310 tokens"),
            std::string::npos)
      << r.output;
}

}  // namespace
