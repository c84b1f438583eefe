// Trainer: it learns, it is deterministic, and save-load-continue equals an uninterrupted run; the
// same for schedule 2bw, whose checkpoints hold both weight versions and load into 2bw jobs only.
#include "site/pipeline/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>

#include "core/model_layout.h"
#include "core/tied_embeddings.h"
#include "site/backend/cpu/cpu_backend.h"
#include "site/nn/checkpoint.h"

namespace strait::site {
namespace {

JobSpec SyntheticJob(ModelFamily family) {
  JobSpec spec;
  spec.model.family = family;
  spec.model.mlp.input = 64;
  spec.model.mlp.hidden = {32, 32};
  spec.model.mlp.classes = 5;
  spec.model.vit.channels = 1;
  spec.model.vit.height = 8;
  spec.model.vit.width = 8;
  spec.model.vit.patch = 4;
  spec.model.vit.dim = 16;
  spec.model.vit.depth = 2;
  spec.model.vit.heads = 2;
  spec.model.vit.mlp_dim = 32;
  spec.model.vit.classes = 5;
  spec.model.vit.dropout = 0.1f;
  spec.data.kind = DatasetKind::kSynthetic;
  spec.data.synthetic_train = 512;
  spec.data.synthetic_test = 256;
  spec.training.steps = 40;
  spec.training.global_batch = 32;
  spec.training.microbatches = 4;
  spec.training.optimizer.lr = 3e-3;
  spec.training.grad_clip = 1.0;
  return spec;
}

std::unique_ptr<Trainer> MakeTrainer(const JobSpec& spec) {
  auto t = Trainer::Create(spec, *CreateCpuBackend(2, spec.training.precision));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("strait_trainer_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(TrainerTest, MlpLearnsSyntheticData) {
  auto t = MakeTrainer(SyntheticJob(ModelFamily::kMlp));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->total_steps(), 40);
  double first = 0, last = 0;
  for (int i = 0; i < 40; ++i) {
    auto s = t->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    if (i == 0) first = s->loss;
    last = s->loss;
  }
  EXPECT_LT(last, first / 2);
  auto evaluation = t->Evaluate();
  ASSERT_TRUE(evaluation.ok());
  EXPECT_GT(evaluation->accuracy, 0.9);
}

TEST_F(TrainerTest, VitLearnsSyntheticData) {
  JobSpec spec = SyntheticJob(ModelFamily::kVit);
  auto t = MakeTrainer(spec);
  ASSERT_NE(t, nullptr);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(t->Step().ok());
  EXPECT_GT(t->Evaluate()->accuracy, 0.8);
}

// A tiny GPT on a text the test writes: a short verse repeated.
JobSpec TinyGptOnAVerse(const std::string& corpus) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "In the beginning God created the heaven and the earth.\n";
  std::ofstream(corpus) << text;
  JobSpec spec = SyntheticJob(ModelFamily::kGpt);
  spec.model.gpt.context = 16;
  spec.model.gpt.dim = 32;
  spec.model.gpt.depth = 2;
  spec.model.gpt.heads = 4;
  spec.model.gpt.mlp_dim = 64;
  spec.data.kind = DatasetKind::kText;
  spec.data.path = corpus;
  spec.data.validation = 0.1;
  spec.training.steps = 60;
  spec.training.global_batch = 16;
  spec.training.optimizer.lr = 1e-2;
  return spec;
}

// The model learns to continue the verse.
TEST_F(TrainerTest, GptLearnsRepeatedText) {
  auto t = MakeTrainer(TinyGptOnAVerse(Path("corpus.txt")));
  ASSERT_NE(t, nullptr);
  double first = 0, last = 0;
  for (int i = 0; i < 60; ++i) {
    auto s = t->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    if (i == 0) first = s->loss;
    last = s->loss;
  }
  EXPECT_NEAR(first, std::log(256.0), 0.5);  // Uniform over bytes at the start.
  EXPECT_LT(last, 1.0) << "nats per byte after 60 steps";
  auto evaluation = t->Evaluate();  // On the held-out tail.
  ASSERT_TRUE(evaluation.ok()) << evaluation.status();
  EXPECT_GT(evaluation->accuracy, 0.6) << "next-byte accuracy";
  EXPECT_LT(evaluation->loss, 1.0) << "nats per byte";
}

// training.precision: bf16 (products of bf16-rounded inputs) learns as fp32 does, a little apart.
TEST_F(TrainerTest, GptInBf16EndsCloseToFp32) {
  JobSpec spec = TinyGptOnAVerse(Path("corpus.txt"));
  std::vector<double> losses;
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    spec.training.precision = precision;
    auto t = MakeTrainer(spec);
    ASSERT_NE(t, nullptr);
    for (int i = 0; i < 60; ++i) ASSERT_TRUE(t->Step().ok());
    auto evaluation = t->Evaluate();
    ASSERT_TRUE(evaluation.ok()) << evaluation.status();
    losses.push_back(evaluation->loss);
  }
  EXPECT_NE(losses[0], losses[1]) << "bf16 rounding changed nothing";
  EXPECT_LT(losses[1], 1.0) << "nats per byte in bf16";
  EXPECT_NEAR(losses[1], losses[0], 0.1 * losses[0]);
}

// tie_embeddings: the head's copy of the matrix starts as the token embedding; both copies take the
// sum of the two gradients (the untied model's two gradients at the same values, summed; and
// finite differences of the loss in the shared matrix), and they stay one matrix.
TEST_F(TrainerTest, TiedEmbeddingsAreOneMatrixWithTheSumOfBothGradients) {
  JobSpec spec = TinyGptOnAVerse(Path("corpus.txt"));
  spec.model.gpt.tie_embeddings = true;
  spec.training.grad_clip = 0.0;
  spec.training.optimizer = {.kind = OptimizerKind::kSgd, .lr = 1.0, .momentum = 0.0};
  const TiedMatrix tied = *TiedMatrixOf(spec.model);
  const std::vector<LayerLayout> layout = BuildModelLayout(spec.model);
  int64_t head = 0;  // Where the head's copy starts: after every other layer and the final LN.
  for (size_t k = 0; k + 1 < layout.size(); ++k) head += layout[k].param_count;
  for (int p = 0; p < tied.head_param; ++p) head += layout.back().params[p].numel;
  const int64_t n = tied.numel;
  auto same = [n](const float* a, const float* b) { return std::memcmp(a, b, 4 * n) == 0; };

  auto t = MakeTrainer(spec);
  ASSERT_NE(t, nullptr);
  const std::vector<float> start = *t->stage().Params();
  EXPECT_TRUE(same(start.data(), start.data() + head)) << "the copies start apart";

  JobSpec untied = spec;
  untied.model.gpt.tie_embeddings = false;
  auto u = MakeTrainer(untied);
  ASSERT_TRUE(u->stage().SetParams(start).ok());
  ASSERT_TRUE(u->Step().ok());
  const std::vector<float> g = *u->stage().Grads(0);

  ASSERT_TRUE(t->Step().ok());
  const std::vector<float> after = *t->stage().Params();
  EXPECT_TRUE(same(after.data(), after.data() + head));
  int64_t largest = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float sum = g[i] + g[head + i];
    ASSERT_EQ(after[i], start[i] - sum) << "element " << i;  // SGD, lr 1
    if (std::abs(sum) > std::abs(g[largest] + g[head + largest])) largest = i;
  }
  // Both uses contribute to the element checked.
  EXPECT_GT(std::abs(g[largest]), 1e-4);
  EXPECT_GT(std::abs(g[head + largest]), 1e-4);

  // d loss / d E[largest], moving both copies.
  const double eps = 1e-2;
  std::vector<double> losses;
  for (double sign : {1.0, -1.0}) {
    std::vector<float> moved = start;
    moved[largest] += static_cast<float>(sign * eps);
    moved[head + largest] = moved[largest];
    auto m = MakeTrainer(spec);
    ASSERT_TRUE(m->stage().SetParams(moved).ok());
    losses.push_back(m->Step()->loss);
  }
  const double numeric = (losses[0] - losses[1]) / (2 * eps);
  const double analytic = g[largest] + g[head + largest];
  EXPECT_NEAR(numeric, analytic, 0.03 * std::abs(analytic) + 1e-4);

  for (int i = 0; i < 5; ++i) ASSERT_TRUE(t->Step().ok());
  const std::vector<float> later = *t->stage().Params();
  EXPECT_TRUE(same(later.data(), later.data() + head));
}

TEST_F(TrainerTest, SameSeedSameBits) {
  JobSpec spec = SyntheticJob(ModelFamily::kVit);
  auto a = MakeTrainer(spec), b = MakeTrainer(spec);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a->Step()->loss, b->Step()->loss);
  }
  EXPECT_EQ(*a->stage().Params(), *b->stage().Params());
  EXPECT_EQ(*a->stage().OptimizerState(), *b->stage().OptimizerState());
}

TEST_F(TrainerTest, SaveLoadContinueEqualsUninterrupted) {
  for (OptimizerKind opt : {OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
    JobSpec spec = SyntheticJob(ModelFamily::kMlp);
    spec.model.mlp.dropout = 0.2f;
    spec.training.optimizer.kind = opt;
    auto straight = MakeTrainer(spec);
    for (int i = 0; i < 6; ++i) ASSERT_TRUE(straight->Step().ok());

    auto first = MakeTrainer(spec);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(first->Step().ok());
    ASSERT_TRUE(first->SaveCheckpoint(Path("ck")).ok());
    first.reset();
    auto resumed = MakeTrainer(spec);
    ASSERT_TRUE(resumed->LoadCheckpoint(Path("ck")).ok());
    EXPECT_EQ(resumed->step(), 3);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(resumed->Step().ok());
    EXPECT_EQ(*resumed->stage().Params(), *straight->stage().Params());
    EXPECT_EQ(*resumed->stage().OptimizerState(), *straight->stage().OptimizerState());
  }
}

TEST_F(TrainerTest, BadCheckpointsAreClearErrors) {
  JobSpec spec = SyntheticJob(ModelFamily::kMlp);
  auto t = MakeTrainer(spec);
  ASSERT_TRUE(t->Step().ok());
  ASSERT_TRUE(t->SaveCheckpoint(Path("ck")).ok());
  EXPECT_FALSE(std::filesystem::exists(Path("ck") + ".tmp." + std::to_string(::getpid())));

  EXPECT_EQ(t->LoadCheckpoint(Path("missing")).code(), absl::StatusCode::kNotFound);

  std::string bytes;
  {
    std::ifstream in(Path("ck"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto write = [&](const std::string& name, const std::string& data) {
    std::ofstream(Path(name), std::ios::binary) << data;
    return Path(name);
  };
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  absl::Status s = t->LoadCheckpoint(write("flipped", flipped));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("checksum"));
  for (size_t len : {size_t{0}, size_t{20}, bytes.size() - 1}) {
    EXPECT_EQ(t->LoadCheckpoint(write("cut", bytes.substr(0, len))).code(),
              absl::StatusCode::kDataLoss);
  }
  std::string version = bytes;
  version[8] = 9;
  s = t->LoadCheckpoint(write("version", version));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(
      std::string(s.message()),
      ::testing::HasSubstr("format version 9 is not supported by this build (expects 1 to 3)"));

  JobSpec other = spec;
  other.model.mlp.hidden = {32, 16};
  auto different = MakeTrainer(other);
  EXPECT_EQ(different->LoadCheckpoint(Path("ck")).code(), absl::StatusCode::kFailedPrecondition);
  other = spec;
  other.data.seed = 99;
  EXPECT_EQ(MakeTrainer(other)->LoadCheckpoint(Path("ck")).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(TrainerTest, TwoBwLearnsAndIsOneUpdateStale) {
  JobSpec spec = SyntheticJob(ModelFamily::kMlp);
  spec.training.schedule = Schedule::k2BW;
  auto t = MakeTrainer(spec);
  JobSpec flushed_spec = SyntheticJob(ModelFamily::kMlp);
  auto flushed = MakeTrainer(flushed_spec);
  double first = 0, last = 0;
  for (int i = 0; i < 40; ++i) {
    auto s = t->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    auto f = flushed->Step();
    ASSERT_TRUE(f.ok()) << f.status();
    if (i == 0) {
      EXPECT_EQ(s->loss, f->loss);                                  // Both compute with L_0 ...
      EXPECT_EQ(*t->stage().Params(), *flushed->stage().Params());  // ... and make L_1.
      first = s->loss;
    }
    if (i == 1) {
      EXPECT_NE(s->loss, f->loss);  // 2bw's step 1 computes with L_0 again.
    }
    last = s->loss;
  }
  EXPECT_NE(*t->stage().Params(), *flushed->stage().Params());
  EXPECT_EQ(t->stage().weights_version(), 40);
  EXPECT_LT(last, first / 2);
  EXPECT_GT(t->Evaluate()->accuracy, 0.9);
}

// Lookahead 2 and 0, and eager updates with clipping and dropped stale gradients, whose checkpoint
// carries the clipping scale of the last step's norm (so the resumed run clips as the other).
TEST_F(TrainerTest, TwoBwSaveLoadContinueEqualsUninterrupted) {
  for (auto [opt, lookahead, eager] : {std::tuple{OptimizerKind::kAdamW, 2.0, false},
                                       {OptimizerKind::kSgd, 2.0, false},
                                       {OptimizerKind::kAdamW, 0.0, false},
                                       {OptimizerKind::kAdamW, 0.0, true}}) {
    SCOPED_TRACE(testing::Message() << "lookahead " << lookahead << (eager ? " eager" : ""));
    JobSpec spec = SyntheticJob(ModelFamily::kMlp);
    spec.model.mlp.dropout = 0.2f;
    spec.training.optimizer.kind = opt;
    spec.training.schedule = Schedule::k2BW;
    spec.training.lookahead = lookahead;
    if (eager) {
      spec.training.update = UpdateTiming::kEager;
      spec.training.stale_gradients = StaleGradients::kDrop;
      spec.training.grad_clip = 0.05;  // Below the steps' norms: the scale matters.
    }
    auto straight = MakeTrainer(spec);
    std::vector<double> losses;
    for (int i = 0; i < 6; ++i) losses.push_back(straight->Step()->loss);

    auto first = MakeTrainer(spec);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(first->Step().ok());
    ASSERT_TRUE(first->SaveCheckpoint(Path("ck")).ok());
    auto state = ReadCheckpoint(Path("ck"));
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->weight_versions, 2u);
    EXPECT_EQ(state->params, *first->stage().Params());                   // L_3
    EXPECT_EQ(state->previous_params, *first->stage().PreviousParams());  // L_2 or P_2
    EXPECT_NE(state->params, state->previous_params);
    EXPECT_EQ(state->lookahead_params.empty(), lookahead == 0.0);
    if (lookahead > 0.0) {
      EXPECT_EQ(state->lookahead_params, *first->stage().LookaheadParams());
    }
    EXPECT_EQ(state->lagged_clip_scale.has_value(), eager);
    if (eager) {
      EXPECT_EQ(*state->lagged_clip_scale, first->stage().lagged_clip_scale());
      EXPECT_LT(*state->lagged_clip_scale, 1.0f);
    }
    first.reset();
    auto resumed = MakeTrainer(spec);
    ASSERT_TRUE(resumed->LoadCheckpoint(Path("ck")).ok());
    EXPECT_EQ(resumed->step(), 3);
    for (int i = 3; i < 6; ++i) EXPECT_EQ(resumed->Step()->loss, losses[i]) << "step " << i;
    EXPECT_EQ(*resumed->stage().Params(), *straight->stage().Params());
    EXPECT_EQ(*resumed->stage().PreviousParams(), *straight->stage().PreviousParams());
    EXPECT_EQ(*resumed->stage().OptimizerState(), *straight->stage().OptimizerState());
  }
}

// The lagged clipping scale of 2bw with eager updates and grad_clip: a job that clips otherwise
// refuses a checkpoint that carries one, and such a job refuses a checkpoint without it.
TEST_F(TrainerTest, CheckpointsDoNotCrossBetweenLaggedAndOtherClipping) {
  JobSpec spec = SyntheticJob(ModelFamily::kMlp);
  spec.training.schedule = Schedule::k2BW;
  spec.training.update = UpdateTiming::kEager;
  spec.training.lookahead = 0.0;
  spec.training.grad_clip = 0.05;
  JobSpec unclipped = spec;
  unclipped.training.grad_clip = 0.0;
  ASSERT_TRUE(MakeTrainer(spec)->SaveCheckpoint(Path("clipped")).ok());
  ASSERT_TRUE(MakeTrainer(unclipped)->SaveCheckpoint(Path("unclipped")).ok());
  absl::Status s = MakeTrainer(unclipped)->LoadCheckpoint(Path("clipped"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("carries the clipping scale"));
  s = MakeTrainer(spec)->LoadCheckpoint(Path("unclipped"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("which the checkpoint lacks"));
}

TEST_F(TrainerTest, CheckpointsDoNotCrossBetweenTwoBwAndOneFOneB) {
  JobSpec spec = SyntheticJob(ModelFamily::kMlp);
  JobSpec two_bw = spec;
  two_bw.training.schedule = Schedule::k2BW;
  auto flushed = MakeTrainer(spec);
  ASSERT_TRUE(flushed->Step().ok());
  ASSERT_TRUE(flushed->SaveCheckpoint(Path("1f1b")).ok());
  auto stale = MakeTrainer(two_bw);
  ASSERT_TRUE(stale->Step().ok());
  ASSERT_TRUE(stale->SaveCheckpoint(Path("2bw")).ok());

  absl::Status s = MakeTrainer(two_bw)->LoadCheckpoint(Path("1f1b"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("written by a 1f1b or gpipe run (one weight version), and this "
                                   "job's schedule 2bw keeps two weight versions"));
  s = MakeTrainer(spec)->LoadCheckpoint(Path("2bw"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("written by a 2bw run"));
  JobSpec gpipe = spec;
  gpipe.training.schedule = Schedule::kGPipe;
  EXPECT_TRUE(MakeTrainer(gpipe)->LoadCheckpoint(Path("1f1b")).ok());

  // A 1f1b checkpoint is still format version 1; a 2bw one is version 2, checked like it.
  std::string bytes;
  {
    std::ifstream in(Path("1f1b"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  EXPECT_EQ(bytes[8], 1);
  {
    std::ifstream in(Path("2bw"), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  EXPECT_EQ(bytes[8], 2);
  for (size_t len : {size_t{20}, size_t{90}, bytes.size() - 4, bytes.size() - 1}) {
    EXPECT_EQ(ParseCheckpoint(bytes.substr(0, len)).status().code(), absl::StatusCode::kDataLoss)
        << len;
  }
  std::string arrays = bytes;
  arrays[8 + 4 + 4 + 8 + 8 + 4 + 4 + 8 + 8 + 8 + 8] = 4;  // the weight-array count
  EXPECT_THAT(std::string(ParseCheckpoint(arrays).status().message()),
              ::testing::HasSubstr("weight arrays"));
  arrays[8 + 4 + 4 + 8 + 8 + 4 + 4 + 8 + 8 + 8 + 8] = 2;  // a lookahead run's file holds 3
  EXPECT_THAT(std::string(ParseCheckpoint(arrays).status().message()),
              ::testing::HasSubstr("truncated or padded"));

  // 2bw with and without lookahead compute with different weights: no crossing either.
  JobSpec plain = two_bw;
  plain.training.lookahead = 0.0;
  s = MakeTrainer(plain)->LoadCheckpoint(Path("2bw"));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              ::testing::HasSubstr("written by a 2bw run with lookahead, and this job's "
                                   "training.lookahead is 0"));
}

// Checkpoints that an earlier build wrote (tests/data/checkpoints: its `strait train` after 3 steps
// of a job, and after 6 as the reference) still load, and training on from them gives that build's
// bits: the same weights, weight versions and optimizer state, and a file equal byte for byte.
// Bits depend on OpenBLAS's kernels, which it picks by CPU: CTest runs this with the Haswell ones
// the files were written with (OPENBLAS_CORETYPE, tests/unit/site/CMakeLists.txt).
TEST_F(TrainerTest, CheckpointsOfEarlierBuildsLoadAndContinue) {
  for (const std::string name : {"1f1b", "2bw", "2bw-eager"}) {
    SCOPED_TRACE(name);
    const std::string dir = STRAIT_SOURCE_DIR "/tests/data/checkpoints/";
    absl::StatusOr<JobSpec> spec = LoadJobSpec(dir + name + ".yaml");
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto t = Trainer::Create(*spec, *CreateCpuBackend(1));
    ASSERT_TRUE(t.ok()) << t.status();
    absl::Status loaded = (*t)->LoadCheckpoint(dir + name + "-step3.ckpt");
    ASSERT_TRUE(loaded.ok()) << loaded;
    EXPECT_EQ((*t)->step(), 3);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*t)->Step().ok());
    auto reference = ReadCheckpoint(dir + name + "-step6.ckpt");
    ASSERT_TRUE(reference.ok()) << reference.status();
    site::StageExecutor& stage = (*t)->stage();
    EXPECT_EQ(*stage.Params(), reference->params);
    EXPECT_EQ(*stage.OptimizerState(), reference->optimizer_state);
    EXPECT_EQ(stage.weight_versions(), static_cast<int>(reference->weight_versions));
    if (stage.weight_versions() == 2) {
      EXPECT_EQ(*stage.PreviousParams(), reference->previous_params);
    }
    if (stage.lookahead() > 0.0f) {
      EXPECT_EQ(*stage.LookaheadParams(), reference->lookahead_params);
    }
    ASSERT_TRUE((*t)->SaveCheckpoint(Path(name)).ok());
    auto bytes = [](const std::string& path) {
      std::ifstream in(path, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    };
    EXPECT_EQ(bytes(Path(name)), bytes(dir + name + "-step6.ckpt"));
  }
}

// The fuzz corpus seed was written by an independent Python encoder of the documented format.
TEST(CheckpointTest, ReadsTheDocumentedFormat) {
  auto s = ReadCheckpoint(STRAIT_SOURCE_DIR "/tests/fuzz/corpus/checkpoint_fuzzer/small.ckpt");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step, 7);
  EXPECT_EQ(s->optimizer_kind, 1u);
  EXPECT_EQ(s->fingerprint, 0x1234u);
  EXPECT_EQ(s->end_layer, 2);
  EXPECT_EQ(s->data_seed, 7u);
  EXPECT_EQ(s->params, (std::vector<float>{0.5f, -1.25f, 2.0f}));
  EXPECT_EQ(s->optimizer_state.size(), 6u);
}

// The arrays every 2bw seed of the checkpoint fuzz corpus holds (written by independent encoders).
void ExpectTwoBwSeedArrays(const CheckpointState& s) {
  EXPECT_EQ(s.weight_versions, 2u);
  EXPECT_EQ(s.params, (std::vector<float>{0.5f, -1.25f, 2.0f}));
  EXPECT_EQ(s.previous_params, (std::vector<float>{0.25f, -1.0f, 1.5f}));
  EXPECT_EQ(s.optimizer_state, (std::vector<float>{0.0f, 0.125f, 0.25f, 0.375f, 0.5f, 0.625f}));
}

// Version 2 (two weight versions, schedule 2bw), written by the same independent encoder.
TEST(CheckpointTest, ReadsTheDocumentedFormatVersionTwo) {
  auto s = ReadCheckpoint(STRAIT_SOURCE_DIR "/tests/fuzz/corpus/checkpoint_fuzzer/small-2bw.ckpt");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step, 8);
  ExpectTwoBwSeedArrays(*s);
}

// Version 2 with the third weight array of lookahead, written by the same independent encoder.
TEST(CheckpointTest, ReadsTheDocumentedFormatWithLookahead) {
  auto s = ReadCheckpoint(STRAIT_SOURCE_DIR
                          "/tests/fuzz/corpus/checkpoint_fuzzer/small-2bw-lookahead.ckpt");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step, 9);
  ExpectTwoBwSeedArrays(*s);
  EXPECT_EQ(s->lookahead_params, (std::vector<float>{1.0f, -1.75f, 3.0f}));
}

// Version 3 (2bw with update eager and grad_clip: the lagged clipping scale), written by a Python
// encoder of the documented format (struct.pack and a bitwise CRC32C).
TEST(CheckpointTest, ReadsTheDocumentedFormatVersionThree) {
  auto s = ReadCheckpoint(STRAIT_SOURCE_DIR
                          "/tests/fuzz/corpus/checkpoint_fuzzer/small-2bw-eager-clip.ckpt");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step, 10);
  ExpectTwoBwSeedArrays(*s);
  EXPECT_EQ(s->lagged_clip_scale, 0.375f);
  EXPECT_TRUE(s->lookahead_params.empty());
  // A lagged scale needs two weight versions.
  CheckpointState one;
  one.params = {1.0f};
  one.lagged_clip_scale = 0.5f;
  EXPECT_EQ(WriteCheckpoint(::testing::TempDir() + "/one.ckpt", one).code(),
            absl::StatusCode::kInvalidArgument);
}

// Every fuzz seed (the regression inputs among them) parses or is refused as DataLoss: replayed
// here so that every build, the ASan one included, runs them, not only the clang fuzz build.
TEST(CheckpointTest, EveryFuzzSeedParsesOrIsRefused) {
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(
           STRAIT_SOURCE_DIR "/tests/fuzz/corpus/checkpoint_fuzzer")) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    absl::StatusOr<CheckpointState> s = ParseCheckpoint(bytes);
    EXPECT_TRUE(s.ok() || s.status().code() == absl::StatusCode::kDataLoss) << entry.path();
    ++seeds;
  }
  EXPECT_GE(seeds, 4);
}

TEST(CheckpointTest, Crc32cKnownAnswer) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);  // the standard check value
}

}  // namespace
}  // namespace strait::site
