// Data: the IDX reader (real files when installed, crafted good and bad files), the synthetic set,
// text windows and the sampler.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "site/data/dataset.h"
#include "site/data/fashion_mnist.h"
#include "site/data/sampler.h"
#include "site/data/synthetic.h"
#include "site/data/text_corpus.h"

namespace strait::site {
namespace {

using ::testing::HasSubstr;

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("strait_idx_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
            "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void WriteGz(const std::string& name, const std::string& bytes) {
    gzFile f = gzopen((dir_ / name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
    gzclose(f);
  }
  static std::string Be32(uint32_t v) {
    return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
            static_cast<char>(v)};
  }
  // n images whose pixels are all `i * 50` for image i, labels i % 10.
  void WriteSet(int n, int label_count, int bad_label = -1) {
    std::string images = Be32(0x803) + Be32(n) + Be32(28) + Be32(28);
    for (int i = 0; i < n; ++i) images += std::string(784, static_cast<char>(i * 50));
    std::string labels = Be32(0x801) + Be32(label_count);
    for (int i = 0; i < label_count; ++i) labels += static_cast<char>(i == bad_label ? 10 : i % 10);
    WriteGz("t10k-images-idx3-ubyte.gz", images);
    WriteGz("t10k-labels-idx1-ubyte.gz", labels);
  }

  std::filesystem::path dir_;
};

TEST_F(IdxTest, ReadsAndNormalises) {
  WriteSet(3, 3);
  auto d = LoadFashionMnist(dir_.string(), Split::kTest);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size, 3);
  EXPECT_EQ(d->features, 784);
  EXPECT_EQ(d->labels, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FLOAT_EQ(d->inputs[784 + 5], (50 / 255.0f - kFashionMnistMean) / kFashionMnistStd);
}

TEST_F(IdxTest, MissingFileNamesThePackage) {
  auto d = LoadFashionMnist(dir_.string(), Split::kTrain);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("dataset-fashion-mnist"));
}

TEST_F(IdxTest, RejectsMalformedFiles) {
  WriteSet(3, 2);  // label count differs
  auto message = [&] {
    return std::string(LoadFashionMnist(dir_.string(), Split::kTest).status().message());
  };
  EXPECT_THAT(message(), HasSubstr("labels"));
  WriteSet(3, 3, /*bad_label=*/1);
  EXPECT_THAT(message(), HasSubstr("not in [0, 10)"));
  WriteGz("t10k-images-idx3-ubyte.gz", Be32(0x803) + Be32(5) + Be32(28) + Be32(28) + "short");
  EXPECT_EQ(LoadFashionMnist(dir_.string(), Split::kTest).status().code(),
            absl::StatusCode::kDataLoss);
  WriteGz("t10k-images-idx3-ubyte.gz", Be32(0x801) + Be32(5) + Be32(0) + Be32(0));
  EXPECT_THAT(message(), HasSubstr("not an IDX file"));
  WriteGz("t10k-images-idx3-ubyte.gz", "");
  EXPECT_EQ(LoadFashionMnist(dir_.string(), Split::kTest).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(FashionMnistTest, InstalledTestSplit) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir + "/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  auto d = LoadFashionMnist(dir, Split::kTest);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size, 10000);
  std::vector<int> per_class(10);
  for (int32_t l : d->labels) ++per_class[l];
  EXPECT_THAT(per_class, ::testing::Each(1000));
}

TEST(SyntheticTest, DeterministicAndInRange) {
  Dataset a = MakeSyntheticDataset(3, Split::kTrain, 50, 12, 4);
  Dataset b = MakeSyntheticDataset(3, Split::kTrain, 50, 12, 4);
  Dataset test = MakeSyntheticDataset(3, Split::kTest, 50, 12, 4);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.inputs, test.inputs);
  for (int32_t l : a.labels) EXPECT_TRUE(l >= 0 && l < 4);
}

class TextTest : public IdxTest {
 protected:
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
};

TEST_F(TextTest, WindowsPredictTheNextByteAndTheTailIsHeldOut) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 26);
  DataSpec data;
  data.kind = DatasetKind::kText;
  data.path = Write("corpus.txt", text);
  data.validation = 0.2;  // 80 training tokens, 20 held out.
  GptSpec gpt;
  gpt.context = 8;
  auto train = LoadTextDataset(data, gpt, Split::kTrain);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->size, 79 / 8);
  EXPECT_EQ(train->features, 8);
  EXPECT_EQ(train->targets, 8);
  EXPECT_EQ(train->classes, 256);
  for (int64_t i = 0; i < train->size * 8; ++i) {
    EXPECT_EQ(train->inputs[i], static_cast<float>(text[i]));
    EXPECT_EQ(train->labels[i], text[i + 1]);
  }
  auto test = LoadTextDataset(data, gpt, Split::kTest);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->size, 19 / 8);
  EXPECT_EQ(test->inputs[0], static_cast<float>(text[80]));
  EXPECT_EQ(test->labels.back(), text[80 + 16]);
  ModelSpec model;
  model.family = ModelFamily::kGpt;
  model.gpt = gpt;
  EXPECT_EQ(*DatasetSize(data, model, Split::kTrain), train->size);
  EXPECT_EQ(*DatasetSize(data, model, Split::kTest), test->size);
}

TEST_F(TextTest, Utf8IsCheckedAndErrorsNameTheFile) {
  const std::string good = "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80";
  EXPECT_TRUE(ReadByteTokens(Write("good.txt", good)).ok());
  for (const std::string& bad : {std::string("ab\xff"), std::string("ab\xc3"),
                                 std::string("\xc0\xaf"), std::string("\xed\xa0\x80")}) {
    const std::string path = Write("bad.txt", bad);
    auto tokens = ReadByteTokens(path);
    ASSERT_FALSE(tokens.ok());
    EXPECT_THAT(tokens.status().message(), HasSubstr(path));
    EXPECT_THAT(tokens.status().message(), HasSubstr("not UTF-8"));
  }
  EXPECT_THAT(ReadByteTokens((dir_ / "missing.txt").string()).status().message(),
              HasSubstr("missing.txt"));

  DataSpec data;
  data.path = Write("short.txt", "too short");
  GptSpec gpt;
  gpt.context = 64;
  auto windows = LoadTextDataset(data, gpt, Split::kTrain);
  ASSERT_FALSE(windows.ok());
  EXPECT_THAT(windows.status().message(), HasSubstr("short.txt"));
  EXPECT_THAT(windows.status().message(), HasSubstr("model.context"));
}

TEST(SamplerTest, EpochsArePermutationsSharedByEveryProcess) {
  Sampler first(7, 10, 3), last(7, 10, 3);
  EXPECT_EQ(first.BatchesPerEpoch(), 3);  // the partial batch is dropped
  std::vector<int64_t> epoch0;
  for (int64_t s = 0; s < 3; ++s) {
    const std::vector<int64_t> batch = first.Batch(s);
    EXPECT_EQ(batch, last.Batch(s));
    epoch0.insert(epoch0.end(), batch.begin(), batch.end());
  }
  std::vector<int64_t> perm = EpochPermutation(7, 0, 10);
  EXPECT_EQ(epoch0, std::vector<int64_t>(perm.begin(), perm.begin() + 9));
  std::sort(perm.begin(), perm.end());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(perm[i], i);
  EXPECT_NE(EpochPermutation(7, 0, 1000), EpochPermutation(7, 1, 1000));
  EXPECT_NE(EpochPermutation(7, 0, 1000), EpochPermutation(8, 0, 1000));
  // Random access: step 4 (epoch 1) does not depend on what was asked before.
  Sampler fresh(7, 10, 3);
  EXPECT_EQ(fresh.Batch(4), first.Batch(4));
}

// Replicas: disjoint shards that together are the batch of one pipeline with R times the batch.
TEST(SamplerTest, ReplicasShareOnePipelinesBatchBetweenThem) {
  Sampler whole(7, 100, 12), r0(7, 100, 4, 0, 3), r1(7, 100, 4, 1, 3), r2(7, 100, 4, 2, 3);
  EXPECT_EQ(r0.BatchesPerEpoch(), whole.BatchesPerEpoch());
  for (int64_t step : {0, 5, 8, 9, 20}) {
    std::vector<int64_t> joined = r0.Batch(step);
    for (Sampler* r : {&r1, &r2}) {
      const std::vector<int64_t>& part = r->Batch(step);
      joined.insert(joined.end(), part.begin(), part.end());
    }
    EXPECT_EQ(joined, whole.Batch(step)) << step;
  }
}

}  // namespace
}  // namespace strait::site
