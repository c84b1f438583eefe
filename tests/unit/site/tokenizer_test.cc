// Tokenizers: bytes, SentencePiece models trained here on text the test writes (BPE and unigram):
// exact round trips (byte fallback for what the pieces do not cover), token byte counts, the
// errors a user meets (missing or broken model, another vocabulary size, bad training input), and
// text windows and their bytes per token under a model.
#include "site/data/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "site/data/dataset.h"
#include "site/data/sentencepiece_api.h"
#include "site/data/text_corpus.h"
#include "site/data/tokenizer_trainer.h"

namespace strait::site {
namespace {

using ::testing::HasSubstr;

// About 40 KB of lines of seeded pseudo-English, a few characters beyond ASCII among them.
std::string Corpus() {
  const std::vector<std::string> words = {
      "the",  "and",   "of",    "to",     "in",     "that",  "he",    "shall", "unto",
      "for",  "his",   "lord",  "they",   "be",     "is",    "him",   "not",   "them",
      "it",   "with",  "all",   "thou",   "thy",    "was",   "god",   "which", "my",
      "me",   "said",  "but",   "ye",     "their",  "have",  "will",  "thee",  "from",
      "as",   "are",   "when",  "this",   "out",    "were",  "upon",  "man",   "by",
      "café", "naïve", "earth", "heaven", "waters", "light", "night", "day",   "firmament"};
  std::mt19937 rng(7);
  std::string text;
  for (int line = 0; line < 700; ++line) {
    text += "  " + std::to_string(line % 31 + 1) + " ";
    const int n = 6 + static_cast<int>(rng() % 8);
    for (int w = 0; w < n; ++w) {
      std::string word = words[rng() % words.size()];
      if (w == 0) word[0] = static_cast<char>(word[0] - 'a' + 'A');
      text += word + (w + 1 < n ? (rng() % 7 == 0 ? ", " : " ") : (rng() % 3 ? "." : ";"));
    }
    text += "\n";
  }
  return text;
}

class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A sanitizer build cannot load SentencePiece (sentencepiece_api.h says why).
    std::string error;
    if (spm::OpenLibrary(&error) == nullptr) GTEST_SKIP() << error;
    dir_ = std::filesystem::temp_directory_path() /
           ("strait_tokenizer_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  // Trains a model of `vocab` tokens on Corpus(); returns its path.
  std::string Train(const std::string& type, int vocab) {
    TokenizerTrainOptions o;
    o.input = Write("corpus.txt", Corpus());
    o.out = (dir_ / (type + ".model")).string();
    o.vocab = vocab;
    o.type = type;
    o.threads = 2;
    absl::StatusOr<TokenizerTrainResult> r = TrainTokenizer(o);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return "";
    EXPECT_EQ(r->vocab, vocab);
    EXPECT_EQ(r->bytes, static_cast<int64_t>(Corpus().size()));
    EXPECT_LT(r->tokens * 2, r->bytes) << "a trained model should beat 2 bytes/token here";
    return o.out;
  }

  std::filesystem::path dir_;
};

// Encode, decode back, and count the bytes the tokens stand for.
void ExpectRoundTrip(const Tokenizer& t, const std::string& text) {
  absl::StatusOr<std::vector<int32_t>> ids = t.Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  for (int32_t id : *ids) ASSERT_TRUE(id >= 0 && id < t.vocab()) << id;
  absl::StatusOr<std::string> back = t.Decode(*ids);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, text);
  int64_t bytes = 0;
  for (int32_t id : *ids) bytes += t.TokenBytes(id);
  EXPECT_EQ(bytes, static_cast<int64_t>(text.size()));
}

const std::string kUnseen =
    "Unseen text: \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e, \xe2\x9c\x93 and \xf0\x9f\x98\x80;\ttabs,"
    "  two spaces,\n\nempty lines, trailing space \nZQXJ 12345 {}[]~\n";

TEST(ByteTokenizerTest, BytesAreOneTokenEach) {
  std::unique_ptr<Tokenizer> t = MakeByteTokenizer();
  EXPECT_EQ(t->vocab(), 256);
  EXPECT_EQ(*t->Encode("A\xc3\xa9"), (std::vector<int32_t>{65, 0xc3, 0xa9}));
  ExpectRoundTrip(*t, kUnseen);
  EXPECT_FALSE(t->Decode(std::vector<int32_t>{256}).ok());
}

TEST_F(TokenizerTest, BpeRoundTripsAnyTextExactly) {
  const std::string model = Train("bpe", 400);
  ASSERT_FALSE(model.empty());
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadSentencePieceTokenizer(model);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab(), 400);
  ExpectRoundTrip(**t, Corpus());
  ExpectRoundTrip(**t, kUnseen);  // Byte fallback for the characters it never saw.
  // Long text goes in chunks that end after a newline; the ids are those of the whole text.
  std::string lines;
  for (int i = 0; i < 12; ++i) lines += Corpus();
  ExpectRoundTrip(**t, lines);
  std::string error;  // SentencePiece itself, on the whole text.
  const spm::Library* library = spm::OpenLibrary(&error);
  ASSERT_NE(library, nullptr) << error;
  std::ifstream in(model, std::ios::binary);
  const std::string contents{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  std::unique_ptr<spm::Model> whole;
  ASSERT_EQ(library->Load(contents, &whole), "");
  std::vector<int> expected;
  ASSERT_EQ(whole->Encode(lines, &expected), "");
  EXPECT_EQ(*(*t)->Encode(lines), std::vector<int32_t>(expected.begin(), expected.end()));
  EXPECT_THAT((*t)->Decode(std::vector<int32_t>{400}).status().message(),
              HasSubstr("not in the vocabulary [0, 400)"));
}

TEST_F(TokenizerTest, UnigramRoundTripsAnyTextExactly) {
  const std::string model = Train("unigram", 400);
  ASSERT_FALSE(model.empty());
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadSentencePieceTokenizer(model);
  ASSERT_TRUE(t.ok()) << t.status();
  ExpectRoundTrip(**t, Corpus());
  ExpectRoundTrip(**t, kUnseen);
}

TEST_F(TokenizerTest, AnotherVocabularySizeNamesTheFileAndWhatToDo) {
  const std::string model = Train("bpe", 400);
  DataSpec data;
  data.tokenizer = model;
  GptSpec gpt;
  gpt.vocab = 512;
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizer(data, gpt);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(), HasSubstr(model));
  EXPECT_THAT(t.status().message(), HasSubstr("vocabulary of 400 tokens but model.vocab is 512"));
  EXPECT_THAT(t.status().message(), HasSubstr("set model.vocab: 400"));
  EXPECT_THAT(t.status().message(), HasSubstr("--vocab 512"));
  gpt.vocab = 400;
  EXPECT_TRUE(LoadTokenizer(data, gpt).ok());
  data.tokenizer = "bytes";
  EXPECT_THAT(LoadTokenizer(data, gpt).status().message(), HasSubstr("model.vocab 256"));
}

TEST_F(TokenizerTest, AMissingOrBrokenModelNamesTheFile) {
  const std::string missing = (dir_ / "missing.model").string();
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadSentencePieceTokenizer(missing);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr(missing));
  EXPECT_THAT(t.status().message(), HasSubstr("strait tokenizer train"));
  for (const std::string& junk : {std::string("not a model at all\n"), std::string()}) {
    const std::string path = Write("junk.model", junk);
    t = LoadSentencePieceTokenizer(path);
    ASSERT_FALSE(t.ok());
    EXPECT_THAT(t.status().message(), HasSubstr(path + ": not a SentencePiece model"));
  }
}

TEST_F(TokenizerTest, TrainingRefusesBadInputWithReasons) {
  TokenizerTrainOptions o;
  o.out = (dir_ / "m.model").string();
  o.input = (dir_ / "missing.txt").string();
  EXPECT_THAT(TrainTokenizer(o).status().message(), HasSubstr("missing.txt: cannot open"));
  o.input = Write("latin1.txt", std::string(100, 'a') + "caf\xe9\n");
  EXPECT_THAT(TrainTokenizer(o).status().message(),
              HasSubstr("latin1.txt: not UTF-8 text (byte 103"));
  o.input = Write("empty.txt", "");
  EXPECT_THAT(TrainTokenizer(o).status().message(), HasSubstr("empty"));
  o.input = Write("corpus.txt", Corpus());
  o.vocab = 259;
  EXPECT_THAT(TrainTokenizer(o).status().message(), HasSubstr("--vocab 259 is outside"));
  o.vocab = 262;  // Fewer than the text's characters need.
  absl::Status s = TrainTokenizer(o).status();
  EXPECT_THAT(s.message(), HasSubstr("--vocab 262 is too small"));
  EXPECT_THAT(s.message(), HasSubstr("lower --character-coverage"));
  o.vocab = 100000;  // More than 40 KB of text yields.
  s = TrainTokenizer(o).status();
  EXPECT_THAT(s.message(), HasSubstr("--vocab 100000 is more than this text yields"));
  o.vocab = 300;
  o.type = "word";
  EXPECT_THAT(TrainTokenizer(o).status().message(), HasSubstr("expected bpe or unigram"));
  EXPECT_FALSE(std::filesystem::exists(o.out));
}

TEST_F(TokenizerTest, WindowsUnderAModelAndTheirBytesPerToken) {
  DataSpec data;
  data.kind = DatasetKind::kText;
  data.path = Write("text.txt", Corpus());
  data.tokenizer = Train("bpe", 400);
  data.validation = 0.1;
  GptSpec gpt;
  gpt.vocab = 400;
  gpt.context = 16;
  absl::StatusOr<std::shared_ptr<const TextTokens>> tokens = TokenizeTextFile(data, gpt);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  const std::vector<int32_t>& ids = (*tokens)->ids;
  // Kept for the next question about the same file and model: no second encoding.
  EXPECT_EQ(TokenizeTextFile(data, gpt)->get(), tokens->get());

  absl::StatusOr<Dataset> test = LoadTextDataset(data, gpt, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  const int64_t cut = static_cast<int64_t>(ids.size()) -
                      static_cast<int64_t>(std::llround(static_cast<double>(ids.size()) * 0.1));
  EXPECT_EQ(test->size, (static_cast<int64_t>(ids.size()) - cut - 1) / 16);
  EXPECT_EQ(test->classes, 400);
  EXPECT_EQ(test->inputs[0], static_cast<float>(ids[cut]));
  EXPECT_EQ(test->labels[0], ids[cut + 1]);
  // Bytes per token: what the labels decode to, over their count.
  const std::vector<int32_t> labels(ids.begin() + cut + 1, ids.begin() + cut + 1 + test->size * 16);
  absl::StatusOr<std::string> text = (*tokens)->tokenizer->Decode(labels);
  ASSERT_TRUE(text.ok());
  EXPECT_DOUBLE_EQ(test->bytes_per_token,
                   static_cast<double>(text->size()) / static_cast<double>(labels.size()));
  EXPECT_GT(test->bytes_per_token, 2.0);

  ModelSpec model;
  model.family = ModelFamily::kGpt;
  model.gpt = gpt;
  absl::StatusOr<Dataset> train = LoadTextDataset(data, gpt, Split::kTrain);
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(*DatasetSize(data, model, Split::kTrain), train->size);
  EXPECT_EQ(*DatasetSize(data, model, Split::kTest), test->size);

  // Another text at the same path: encoded anew.
  Write("text.txt", Corpus() + Corpus());
  absl::StatusOr<std::shared_ptr<const TextTokens>> again = TokenizeTextFile(data, gpt);
  ASSERT_TRUE(again.ok());
  EXPECT_GT((*again)->ids.size(), ids.size());

  // A model of another size: the data set is refused, naming the model.
  gpt.vocab = 256;
  EXPECT_THAT(LoadTextDataset(data, gpt, Split::kTrain).status().message(),
              HasSubstr(data.tokenizer));
  // With bytes, a token is a byte.
  data.tokenizer = "bytes";
  absl::StatusOr<Dataset> bytes = LoadTextDataset(data, gpt, Split::kTest);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(bytes->bytes_per_token, 1.0);
}

}  // namespace
}  // namespace strait::site
