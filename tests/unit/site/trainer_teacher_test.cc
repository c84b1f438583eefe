// `strait train` with a teacher (knowledge sharing): the teacher's checkpoint is loaded and
// checked, the student's loss reads the teacher's targets row for row, the reported loss stays the
// labels' cross-entropy, and the run is deterministic.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "site/backend/cpu/cpu_backend.h"
#include "site/pipeline/trainer.h"

namespace strait::site {
namespace {

ModelSpec Gpt(int dim, int depth) {
  ModelSpec m;
  m.family = ModelFamily::kGpt;
  m.gpt = GptSpec{
      .vocab = 256, .context = 16, .dim = dim, .depth = depth, .heads = 4, .mlp_dim = 2 * dim};
  return m;
}

class TrainerTeacherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("strait_teacher_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::string text;
    for (int i = 0; i < 300; ++i) text += "in the beginning was the word, and the word was good. ";
    std::ofstream(dir_ / "corpus.txt") << text;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  JobSpec Spec(const ModelSpec& model, int steps) const {
    JobSpec spec;
    spec.model = model;
    spec.data.kind = DatasetKind::kText;
    spec.data.path = (dir_ / "corpus.txt").string();
    spec.training.steps = steps;
    spec.training.global_batch = 8;
    spec.training.microbatches = 2;
    spec.training.optimizer.lr = 1e-2;
    spec.sites = {SiteSpec{.id = "a", .layers = {0, model.NumLayers()}}};
    return spec;
  }

  // Trains `model` for `steps` and saves it as the teacher's checkpoint.
  std::string TrainTeacher(const ModelSpec& model, int steps) {
    auto t = Trainer::Create(Spec(model, steps), *CreateCpuBackend(1));
    EXPECT_TRUE(t.ok()) << t.status();
    for (int i = 0; i < steps; ++i) EXPECT_TRUE((*t)->Step().ok());
    const std::string path = (dir_ / "teacher.ckpt").string();
    EXPECT_TRUE((*t)->SaveCheckpoint(path).ok());
    return path;
  }

  JobSpec Taught(const ModelSpec& student, const ModelSpec& teacher, const std::string& ckpt) {
    JobSpec spec = Spec(student, 10);
    spec.has_teacher = true;
    spec.teacher.model = teacher;
    spec.teacher.checkpoint = ckpt;
    spec.teacher.top_k = 8;
    spec.teacher.sites = {SiteSpec{.id = "t", .layers = {0, teacher.NumLayers()}}};
    return spec;
  }

  absl::StatusOr<std::unique_ptr<Trainer>> Create(const JobSpec& spec) {
    return Trainer::Create(spec, *CreateCpuBackend(1), *CreateCpuBackend(1));
  }

  std::filesystem::path dir_;
};

TEST_F(TrainerTeacherTest, ATaughtRunIsDeterministicAndReportsTheLabelsCrossEntropy) {
  const std::string ckpt = TrainTeacher(Gpt(32, 2), 30);
  const JobSpec spec = Taught(Gpt(16, 1), Gpt(32, 2), ckpt);
  auto a = Create(spec), b = Create(spec);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  auto alone = Trainer::Create(Spec(Gpt(16, 1), 10), *CreateCpuBackend(1));
  ASSERT_TRUE(alone.ok());
  for (int i = 0; i < 10; ++i) {
    absl::StatusOr<StepStats> sa = (*a)->Step(), sb = (*b)->Step(), s = (*alone)->Step();
    ASSERT_TRUE(sa.ok() && sb.ok() && s.ok()) << sa.status() << sb.status();
    EXPECT_EQ(sa->loss, sb->loss);
    // Step 0 computes with the same initial weights: the same cross-entropy (host double sums
    // against the backend's float ones), though the taught gradient differs.
    if (i == 0) {
      EXPECT_NEAR(sa->loss, s->loss, 1e-4 * s->loss);
    }
  }
  EXPECT_EQ(*(*a)->stage().Params(), *(*b)->stage().Params());
  EXPECT_NE(*(*a)->stage().Params(), *(*alone)->stage().Params());
}

// A teacher that is the student itself, at temperature 1, telling all 256 probabilities: the soft
// term's gradient vanishes (up to the probabilities' fp16 rounding), so with alpha 0 and SGD the
// weights barely move. Targets read from the wrong rows would move them as much as labels do.
TEST_F(TrainerTeacherTest, TheTargetsOfEachRowTeachThatRow) {
  const ModelSpec model = Gpt(16, 1);
  auto init = Trainer::Create(Spec(model, 1), *CreateCpuBackend(1));
  ASSERT_TRUE(init.ok());
  const std::string ckpt = (dir_ / "self.ckpt").string();
  ASSERT_TRUE((*init)->SaveCheckpoint(ckpt).ok());
  JobSpec spec = Taught(model, model, ckpt);
  spec.teacher.top_k = 256;
  spec.training.distill = {.alpha = 0.0, .temperature = 1.0};
  spec.training.optimizer.kind = OptimizerKind::kSgd;
  spec.training.optimizer.momentum = 0;
  spec.training.optimizer.lr = 1.0;
  auto taught = Create(spec);
  ASSERT_TRUE(taught.ok()) << taught.status();
  const std::vector<float> before = *(*taught)->stage().Params();
  ASSERT_TRUE((*taught)->Step().ok());
  const std::vector<float> after = *(*taught)->stage().Params();
  double moved = 0;
  for (size_t i = 0; i < before.size(); ++i)
    moved = std::max<double>(moved, std::abs(after[i] - before[i]));
  EXPECT_LT(moved, 2e-3);
  // The labels alone (alpha 1) move them much further.
  spec.training.distill.alpha = 1.0;
  auto labels = Create(spec);
  ASSERT_TRUE(labels.ok());
  ASSERT_TRUE((*labels)->Step().ok());
  const std::vector<float> by_labels = *(*labels)->stage().Params();
  double moved_by_labels = 0;
  for (size_t i = 0; i < before.size(); ++i) {
    moved_by_labels = std::max<double>(moved_by_labels, std::abs(by_labels[i] - before[i]));
  }
  EXPECT_GT(moved_by_labels, 20 * moved);
}

TEST_F(TrainerTeacherTest, ACheckpointOfAnotherModelIsRefusedByName) {
  const std::string ckpt = TrainTeacher(Gpt(32, 2), 1);
  auto t = Create(Taught(Gpt(16, 1), Gpt(48, 2), ckpt));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(t.status().message(), ::testing::HasSubstr("of another model than teacher.model"));
  EXPECT_THAT(t.status().message(), ::testing::HasSubstr(ckpt));
  auto missing = Create(Taught(Gpt(16, 1), Gpt(32, 2), (dir_ / "none.ckpt").string()));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), ::testing::HasSubstr("teacher.checkpoint"));
}

}  // namespace
}  // namespace strait::site
