// Token shards (`strait data prepare`, `data: {format: tokens}`): the shards hold exactly the
// documents' tokens in order (bytes, and a SentencePiece model trained here), read in small chunks
// that cut characters and lines; the windows and labels of each split are text_corpus's windows of
// the split's documents; the held-out split is whole documents at the end; and the errors a user
// meets: another tokenizer, a damaged index, a short or missing shard, a token outside the
// vocabulary, text that is not UTF-8 (and an interrupted run leaves no index).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "site/data/dataset.h"
#include "site/data/sentencepiece_api.h"
#include "site/data/text_corpus.h"
#include "site/data/token_dataset.h"
#include "site/data/token_index.h"
#include "site/data/token_shard_writer.h"
#include "site/data/tokenizer.h"
#include "site/data/tokenizer_trainer.h"

namespace strait::site {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Five documents of different lengths, characters of two to four bytes among them.
std::vector<std::string> Documents() {
  std::vector<std::string> docs;
  for (int d = 0; d < 5; ++d) {
    std::string text;
    for (int line = 0; line < 4 + 3 * d; ++line) {
      text += std::to_string(d) + ":" + std::to_string(line) +
              " In the beginning God created the heaven and the earth, caf\xc3\xa9 \xe2\x82\xac "
              "\xf0\x9f\x98\x80.\n";
    }
    docs.push_back(text);
  }
  return docs;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class TokenShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("strait_shards_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    for (size_t d = 0; d < docs_.size(); ++d) {
      inputs_.push_back((dir_ / ("doc" + std::to_string(d) + ".txt")).string());
      std::ofstream(inputs_.back(), std::ios::binary) << docs_[d];
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Out() const { return (dir_ / "shards").string(); }

  // Prepares docs_ in chunks of 7 bytes (characters and lines cut) and shards of 97 tokens.
  absl::StatusOr<TokenIndex> Prepare(const Tokenizer& tokenizer, TokenShardOptions o = {}) {
    if (o.inputs.empty()) o.inputs = inputs_;
    o.out = Out();
    o.shard_tokens = 97;
    o.chunk_bytes = 7;
    return PrepareTokenShards(o, tokenizer, nullptr);
  }

  // The stream of tokens the shards hold.
  std::vector<int32_t> ShardTokens(const TokenIndex& index) const {
    std::vector<int32_t> tokens;
    const int width = TokenWidth(index.dtype);
    for (const TokenShard& s : index.shards) {
      const std::string bytes = ReadFile(fs::path(Out()) / s.file);
      EXPECT_EQ(static_cast<int64_t>(bytes.size()), s.bytes) << s.file;
      for (size_t i = 0; i + width <= bytes.size(); i += width) {
        uint32_t v = 0;
        for (int b = width - 1; b >= 0; --b) v = v << 8 | static_cast<unsigned char>(bytes[i + b]);
        tokens.push_back(static_cast<int32_t>(v));
      }
    }
    return tokens;
  }

  DataSpec Spec(double validation = 0.2) const {
    DataSpec data;
    data.kind = DatasetKind::kText;
    data.format = DataFormat::kTokens;
    data.path = Out();
    data.tokenizer = "bytes";
    data.validation = validation;
    return data;
  }

  const std::vector<std::string> docs_ = Documents();
  std::vector<std::string> inputs_;
  fs::path dir_;
};

TEST_F(TokenShardsTest, BytesShardsHoldTheDocumentsInOrder) {
  absl::StatusOr<TokenIndex> index = Prepare(*MakeByteTokenizer());
  ASSERT_TRUE(index.ok()) << index.status();
  const std::string all = std::accumulate(docs_.begin(), docs_.end(), std::string());
  EXPECT_EQ(index->dtype, TokenDtype::kUint16);
  EXPECT_EQ(index->vocab, 256);
  EXPECT_EQ(index->tokenizer, "bytes");
  EXPECT_EQ(index->tokens, static_cast<int64_t>(all.size()));
  EXPECT_EQ(index->shards.size(), (all.size() + 96) / 97);
  EXPECT_EQ(index->shards[0].file, "shard-00000.bin");
  EXPECT_EQ(ShardTokens(*index), MakeByteTokenizer()->Encode(all).value());
  ASSERT_EQ(index->documents.size(), docs_.size());
  int64_t offset = 0;
  for (size_t d = 0; d < docs_.size(); ++d) {
    EXPECT_EQ(index->documents[d].offset, offset);
    EXPECT_EQ(index->documents[d].tokens, static_cast<int64_t>(docs_[d].size()));
    EXPECT_EQ(index->documents[d].bytes, static_cast<int64_t>(docs_[d].size()));
    offset += static_cast<int64_t>(docs_[d].size());
  }
  // What is on disk is what was returned; nothing temporary is left.
  absl::StatusOr<TokenIndex> read = ReadTokenIndex(Out());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(FormatTokenIndex(*read), FormatTokenIndex(*index));
  for (const fs::directory_entry& e : fs::directory_iterator(Out())) {
    EXPECT_EQ(e.path().extension(), e.path().filename() == "index.json" ? ".json" : ".bin");
  }
  // uint32 on request.
  TokenShardOptions wide;
  wide.dtype = TokenDtype::kUint32;
  index = Prepare(*MakeByteTokenizer(), wide);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->shards[0].bytes, 4 * 97);
  EXPECT_EQ(ShardTokens(*index), MakeByteTokenizer()->Encode(all).value());
}

TEST_F(TokenShardsTest, WindowsAreTextCorpusWindowsOfEachSplitsWholeDocuments) {
  ASSERT_TRUE(Prepare(*MakeByteTokenizer()).ok());
  GptSpec gpt;
  gpt.vocab = 256;
  gpt.context = 8;
  const DataSpec data = Spec(0.2);
  ModelSpec model;
  model.family = ModelFamily::kGpt;
  model.gpt = gpt;
  for (Split split : {Split::kTrain, Split::kTest}) {
    SCOPED_TRACE(split == Split::kTrain ? "train" : "test");
    absl::StatusOr<TokenIndex> index = ReadTokenIndex(Out());
    ASSERT_TRUE(index.ok());
    absl::StatusOr<TokenSplit> s = SplitTokenDocuments(*index, 0.2, split, "index.json");
    ASSERT_TRUE(s.ok()) << s.status();
    // The held-out split: the last document (16 of the 50 lines) is closest to a fifth of the
    // tokens; with the one before it, 29 lines would be further.
    const size_t cut = 4;
    EXPECT_EQ(s->first_document, split == Split::kTrain ? 0u : cut);
    EXPECT_EQ(s->end_document, split == Split::kTrain ? cut : docs_.size());
    std::string text;
    for (size_t d = s->first_document; d < s->end_document; ++d) text += docs_[d];
    const std::vector<int32_t> tokens = MakeByteTokenizer()->Encode(text).value();
    // text_corpus's windows of exactly these tokens (no held-out part).
    absl::StatusOr<Dataset> expected = MakeTextWindows(tokens, 0.0, gpt, Split::kTrain);
    ASSERT_TRUE(expected.ok()) << expected.status();

    absl::StatusOr<Dataset> d = LoadDataset(data, model, split);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_NE(d->windows, nullptr);
    EXPECT_TRUE(d->inputs.empty());
    EXPECT_EQ(d->size, expected->size);
    EXPECT_EQ(d->features, 8);
    EXPECT_EQ(d->targets, 8);
    EXPECT_EQ(d->classes, 256);
    EXPECT_EQ(d->bytes_per_token, 1.0);
    absl::StatusOr<int64_t> size = DatasetSize(data, model, split);
    ASSERT_TRUE(size.ok()) << size.status();
    EXPECT_EQ(*size, d->size);
    std::vector<int64_t> all(d->size);
    std::iota(all.begin(), all.end(), 0);
    std::vector<float> inputs;
    std::vector<int32_t> labels;
    ASSERT_TRUE(GatherSamples(*d, all.data(), static_cast<int>(all.size()), &inputs, &labels).ok());
    EXPECT_EQ(inputs, expected->inputs);
    EXPECT_EQ(labels, expected->labels);
    // In any order, and one side only (a first stage reads inputs, a last stage labels).
    const int64_t picked[] = {d->size - 1, 0};
    std::vector<int32_t> two;
    ASSERT_TRUE(GatherSamples(*d, picked, 2, nullptr, &two).ok());
    EXPECT_EQ(std::vector<int32_t>(two.begin(), two.begin() + 8),
              std::vector<int32_t>(expected->labels.end() - 8, expected->labels.end()));
    const int64_t outside = d->size;
    EXPECT_FALSE(GatherSamples(*d, &outside, 1, &inputs, nullptr).ok());
  }
}

TEST_F(TokenShardsTest, HeldOutSplitIsWholeDocumentsAndNeedsTwo) {
  TokenIndex index;
  index.tokens = 100;
  index.documents = {{0, 50, 50}, {50, 30, 30}, {80, 15, 15}, {95, 5, 5}};
  // 0.2 of 100: the last two documents (20 tokens).
  absl::StatusOr<TokenSplit> s = SplitTokenDocuments(index, 0.2, Split::kTest, "i");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->begin, 80);
  EXPECT_EQ(s->end, 100);
  s = SplitTokenDocuments(index, 0.2, Split::kTrain, "i");
  EXPECT_EQ(s->begin, 0);
  EXPECT_EQ(s->end, 80);
  // At least the last document, however small the fraction; never all of them.
  EXPECT_EQ(SplitTokenDocuments(index, 0.001, Split::kTest, "i")->begin, 95);
  EXPECT_EQ(SplitTokenDocuments(index, 0.5, Split::kTrain, "i")->end, 50);
  EXPECT_EQ(SplitTokenDocuments(index, 0.99, Split::kTrain, "i")->end, 50);
  index.documents = {{0, 100, 100}};
  s = SplitTokenDocuments(index, 0.05, Split::kTrain, "/x/index.json");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              AllOf(HasSubstr("/x/index.json"), HasSubstr("one document")));
}

TEST_F(TokenShardsTest, SentencePieceShardsHoldEachDocumentsIds) {
  std::string error;
  if (spm::OpenLibrary(&error) == nullptr) GTEST_SKIP() << error;
  TokenizerTrainOptions t;
  t.input = (dir_ / "train.txt").string();
  std::ofstream(t.input) << std::accumulate(docs_.begin(), docs_.end(), std::string());
  t.out = (dir_ / "t.model").string();
  t.vocab = 300;
  t.threads = 2;
  ASSERT_TRUE(TrainTokenizer(t).ok());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadSentencePieceTokenizer(t.out);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<TokenIndex> index =
      PrepareTokenShards({.inputs = inputs_, .out = Out(), .shard_tokens = 97, .chunk_bytes = 100},
                         **tokenizer, nullptr);
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->tokenizer, (*tokenizer)->fingerprint());
  EXPECT_EQ(index->vocab, 300);
  std::vector<int32_t> expected;
  for (size_t d = 0; d < docs_.size(); ++d) {
    const std::vector<int32_t> ids = (*tokenizer)->Encode(docs_[d]).value();
    EXPECT_EQ(index->documents[d].offset, static_cast<int64_t>(expected.size()));
    EXPECT_EQ(index->documents[d].tokens, static_cast<int64_t>(ids.size()));
    EXPECT_EQ(index->documents[d].bytes, static_cast<int64_t>(docs_[d].size()));
    expected.insert(expected.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(ShardTokens(*index), expected);
  // A job reads them with the same model, bits per byte from the documents' bytes.
  DataSpec data = Spec(0.2);
  data.tokenizer = t.out;
  GptSpec gpt;
  gpt.vocab = 300;
  gpt.context = 8;
  absl::StatusOr<Dataset> d = LoadTokenDataset(data, gpt, Split::kTest);
  ASSERT_TRUE(d.ok()) << d.status();
  // The held-out split is the last document.
  EXPECT_DOUBLE_EQ(d->bytes_per_token, static_cast<double>(docs_[4].size()) /
                                           static_cast<double>(index->documents[4].tokens));
  EXPECT_GT(d->bytes_per_token, 1.2);
  // Byte tokens against these shards: another tokenizer.
  data.tokenizer = "bytes";
  gpt.vocab = 256;
  d = LoadTokenDataset(data, gpt, Split::kTest);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr(Out() + "/index.json"), HasSubstr("'bytes'"),
                    HasSubstr((*tokenizer)->fingerprint())));
}

TEST_F(TokenShardsTest, AnotherTokenizerIsRefusedNamingTheIndexAndBothFingerprints) {
  ASSERT_TRUE(Prepare(*MakeByteTokenizer()).ok());
  const fs::path index = fs::path(Out()) / "index.json";
  const std::string json = ReadFile(index);
  std::ofstream(index, std::ios::binary) << absl::StrReplaceAll(
      json, {{"\"tokenizer\": \"bytes\"", "\"tokenizer\": \"sentencepiece:00ff:12\""}});
  GptSpec gpt;
  gpt.context = 8;
  for (Split split : {Split::kTrain, Split::kTest}) {
    absl::StatusOr<int64_t> size = TokenDatasetSize(Spec(), gpt, split);
    ASSERT_FALSE(size.ok());
    EXPECT_EQ(size.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(
        std::string(size.status().message()),
        AllOf(HasSubstr(index.string()), HasSubstr("sentencepiece:00ff:12"), HasSubstr("'bytes'")));
    EXPECT_FALSE(LoadTokenDataset(Spec(), gpt, split).ok());
  }
}

TEST_F(TokenShardsTest, DamagedIndexShortOrMissingShardAreClearErrors) {
  ASSERT_TRUE(Prepare(*MakeByteTokenizer()).ok());
  GptSpec gpt;
  gpt.context = 8;
  const fs::path index = fs::path(Out()) / "index.json";
  const std::string good = ReadFile(index);
  const auto expect_error = [&](absl::StatusCode code, std::vector<std::string> words) {
    absl::StatusOr<Dataset> d = LoadTokenDataset(Spec(), gpt, Split::kTrain);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), code) << d.status();
    for (const std::string& w : words) EXPECT_THAT(std::string(d.status().message()), HasSubstr(w));
  };
  std::ofstream(index, std::ios::binary) << "{\"format\": \"strait-token-shards\", \"vers";
  expect_error(absl::StatusCode::kDataLoss, {index.string(), "not a JSON object"});
  std::ofstream(index, std::ios::binary)
      << absl::StrReplaceAll(good, {{"\"bytes\": 194", "\"bytes\": 190"}});
  expect_error(absl::StatusCode::kDataLoss, {index.string(), "shards[0].bytes"});
  std::ofstream(index, std::ios::binary) << absl::StrReplaceAll(
      good, {{"\"file\": \"shard-00001.bin\"", "\"file\": \"../shard-00001.bin\""}});
  expect_error(absl::StatusCode::kDataLoss, {index.string(), "shards[1].file"});
  std::ofstream(index, std::ios::binary) << good;
  ASSERT_TRUE(LoadTokenDataset(Spec(), gpt, Split::kTrain).ok());

  const fs::path shard = fs::path(Out()) / "shard-00001.bin";
  fs::resize_file(shard, 100);
  expect_error(absl::StatusCode::kDataLoss, {shard.string(), "100 bytes", "shards[1]"});
  // The index alone gives the sizes: the shards are not even opened.
  EXPECT_TRUE(TokenDatasetSize(Spec(), gpt, Split::kTrain).ok());
  fs::remove(shard);
  expect_error(absl::StatusCode::kNotFound, {shard.string(), "index.json"});
  EXPECT_TRUE(TokenDatasetSize(Spec(), gpt, Split::kTrain).ok());
  fs::remove(index);
  expect_error(absl::StatusCode::kNotFound, {index.string(), "strait data prepare"});
  // The formats mixed up: a text file read as shards, shards read as a text file.
  DataSpec data = Spec();
  data.path = inputs_[0];
  absl::StatusOr<Dataset> d = LoadTokenDataset(data, gpt, Split::kTrain);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr(inputs_[0]), HasSubstr("format: text")));
  data = Spec();
  data.format = DataFormat::kText;
  d = LoadTextDataset(data, gpt, Split::kTrain);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr(Out()), HasSubstr("format: tokens")));
}

TEST_F(TokenShardsTest, ATokenOutsideTheVocabularyIsAnErrorNotAnIndex) {
  ASSERT_TRUE(Prepare(*MakeByteTokenizer()).ok());
  const fs::path shard = fs::path(Out()) / "shard-00000.bin";
  std::string bytes = ReadFile(shard);
  bytes[10] = '\x00';
  bytes[11] = '\x01';  // Token 5 = 256.
  std::ofstream(shard, std::ios::binary) << bytes;
  GptSpec gpt;
  gpt.context = 8;
  absl::StatusOr<Dataset> d = LoadTokenDataset(Spec(), gpt, Split::kTrain);
  ASSERT_TRUE(d.ok()) << d.status();
  const int64_t first = 0;
  std::vector<float> inputs;
  absl::Status s = GatherSamples(*d, &first, 1, &inputs, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr(shard.string()), HasSubstr("token 5 of the shard is 256")));
}

TEST_F(TokenShardsTest, TextThatIsNotUtf8NamesFileAndOffsetAndLeavesNoIndex) {
  ASSERT_TRUE(Prepare(*MakeByteTokenizer()).ok());
  // Byte 20 of the third document is a lone continuation byte; chunks of 7 bytes cut around it.
  std::string bad = docs_[2];
  bad[20] = '\x80';
  std::ofstream(inputs_[2], std::ios::binary) << bad;
  absl::StatusOr<TokenIndex> index = Prepare(*MakeByteTokenizer());
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(index.status().message()),
              AllOf(HasSubstr(inputs_[2]), HasSubstr("byte 20 ")));
  // The earlier run's index is gone: nothing claims the shards.
  EXPECT_FALSE(fs::exists(fs::path(Out()) / "index.json"));
  // A character cut short at the very end of a file.
  std::ofstream(inputs_[2], std::ios::binary) << docs_[2] << "\xe2\x82";
  index = Prepare(*MakeByteTokenizer());
  ASSERT_FALSE(index.ok());
  EXPECT_THAT(std::string(index.status().message()),
              HasSubstr("byte " + std::to_string(docs_[2].size()) + " "));
  // A missing input is named before anything is written.
  TokenShardOptions o;
  o.inputs = {inputs_[0], (dir_ / "nope.txt").string()};
  index = Prepare(*MakeByteTokenizer(), o);
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(index.status().message()), HasSubstr("nope.txt"));
}

TEST(TokenIndexTest, ParsesWhatItFormatsAndChecksEveryNumber) {
  TokenIndex index;
  index.dtype = TokenDtype::kUint32;
  index.vocab = 70000;
  index.tokenizer = "sentencepiece:0123:45";
  index.tokens = 10;
  index.shards = {{"shard-00000.bin", 6, 24}, {"shard-00001.bin", 4, 16}};
  index.documents = {{0, 7, 20}, {7, 0, 0}, {7, 3, 9}};
  const std::string json = FormatTokenIndex(index);
  absl::StatusOr<TokenIndex> parsed = ParseTokenIndex(json, "d/index.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(FormatTokenIndex(*parsed), json);
  const auto error = [&](const std::string& from, const std::string& to) {
    absl::StatusOr<TokenIndex> p =
        ParseTokenIndex(absl::StrReplaceAll(json, {{from, to}}), "d/index.json");
    EXPECT_FALSE(p.ok()) << to;
    return p.ok() ? std::string() : std::string(p.status().message());
  };
  EXPECT_THAT(error("\"version\": 1", "\"version\": 2"), HasSubstr("version"));
  EXPECT_THAT(error("\"uint32\"", "\"uint16\""), HasSubstr("vocab"));  // 70000 > 65536.
  EXPECT_THAT(error("\"tokens\": 10", "\"tokens\": 11"), HasSubstr("tokens: 11, but the shards"));
  EXPECT_THAT(error("\"tokens\": 4", "\"tokens\": -4"), HasSubstr("shards[1].tokens"));
  EXPECT_THAT(error("\"offset\": 7, \"tokens\": 0", "\"offset\": 6, \"tokens\": 0"),
              HasSubstr("documents[1].offset"));
  EXPECT_THAT(error("\"offset\": 7, \"tokens\": 3", "\"offset\": 7, \"tokens\": 4"),
              HasSubstr("documents[2].tokens"));
  EXPECT_THAT(error("\"tokens\": 6", "\"tokens\": 6.5"), HasSubstr("not an integer"));
  EXPECT_THAT(error("\"tokens\": 6", "\"tokens\": 99999999999999999999"),
              HasSubstr("shards[0].tokens"));
  EXPECT_THAT(error("shard-00001.bin", "shard-00000.bin"), HasSubstr("named twice"));
  EXPECT_THAT(error("shard-00001.bin", "/etc/passwd"), HasSubstr("plain file name"));
  EXPECT_THAT(error("\"documents\": [", "\"documentz\": ["), HasSubstr("documents"));
  EXPECT_THAT(error("strait-token-shards", "safetensors"), HasSubstr("format"));
}

}  // namespace
}  // namespace strait::site
