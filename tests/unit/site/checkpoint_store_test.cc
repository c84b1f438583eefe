// CheckpointStore: where a site's coordinated checkpoints go, which are kept, and which one
// --resume may use (DESIGN.md §7).
#include "site/daemon/checkpoint_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness/subprocess.h"
#include "site/nn/checkpoint.h"
#include "tests/unit/core/mem_env.h"

namespace strait::site {
namespace {

class CheckpointStoreTest : public ::testing::Test {
 protected:
  CheckpointStoreTest() {
    spec_.name = "store-test";
    spec_.model.family = ModelFamily::kMlp;
    spec_.model.mlp.input = 8;
    spec_.model.mlp.hidden = {16};
    spec_.model.mlp.classes = 4;
    spec_.training.optimizer.kind = OptimizerKind::kAdamW;
    spec_.training.checkpoint.every = 10;
    spec_.training.checkpoint.keep = 1;  // At least two are kept anyway.
    spec_.training.checkpoint.dir = dir_.path();
  }

  std::unique_ptr<StageExecutor> Stage(uint64_t init_seed, LayerRange layers = {0, 2}) {
    spec_.model.init_seed = init_seed;
    auto group = StageExecutor::Create(spec_.model, layers, spec_.training.optimizer, 4, {}, {});
    EXPECT_TRUE(group.ok()) << group.status();
    return *std::move(group);
  }

  harness::TempDir dir_;
  JobSpec spec_;
};

TEST_F(CheckpointStoreTest, DueEveryKStepsAndKeepsAtLeastTwo) {
  CheckpointStore store(spec_, "dc-a", *Env::Default());
  EXPECT_FALSE(store.Due(0));
  EXPECT_FALSE(store.Due(5));
  EXPECT_TRUE(store.Due(20));
  auto stage = Stage(1);
  for (int step : {10, 20, 30}) ASSERT_TRUE(store.Save(step, *stage).ok());
  EXPECT_EQ(store.Steps(), (std::vector<int64_t>{20, 30}));
  EXPECT_EQ(store.dir(), dir_.path() + "/dc-a");
  // A temporary left by an interrupted write is not a checkpoint.
  std::ofstream(store.PathFor(40) + ".tmp") << "partial";
  EXPECT_EQ(store.Steps(), (std::vector<int64_t>{20, 30}));
}

TEST_F(CheckpointStoreTest, NewestValidSkipsDamagedAndForeignFiles) {
  CheckpointStore store(spec_, "dc-a", *Env::Default());
  auto stage = Stage(1);
  for (int step : {10, 20}) ASSERT_TRUE(store.Save(step, *stage).ok());
  EXPECT_EQ(*store.NewestValid(*stage), 20);
  std::filesystem::resize_file(store.PathFor(20), 100);  // Truncated.
  EXPECT_EQ(*store.NewestValid(*stage), 10);
  // Another job's seeds: refused, and nothing else is left.
  CheckpointStore other(spec_, "dc-a", *Env::Default());
  auto foreign = Stage(2);
  EXPECT_EQ(other.NewestValid(*foreign).status().code(), absl::StatusCode::kNotFound);
}

// A planned split's site may offer a checkpoint of other layers (they move at the rollback:
// site/daemon/layer_moves.h); a fixed split's may not. The checkpoint it trained before a move
// goes with it when it is too old to keep.
TEST_F(CheckpointStoreTest, APlannedSplitOffersCheckpointsOfOtherLayers) {
  CheckpointStore store(spec_, "dc-a", *Env::Default());
  auto first = Stage(1, {0, 1});
  for (int step : {10, 20}) ASSERT_TRUE(store.Save(step, *first).ok());
  auto second = Stage(1, {1, 2});
  EXPECT_EQ(store.NewestValid(*second).status().code(), absl::StatusCode::kNotFound);
  spec_.sites.push_back({.id = "dc-a", .plan_layers = true});  // layers: auto, planned.
  EXPECT_EQ(*store.NewestValid(*second), 20);
  std::filesystem::copy_file(store.PathFor(10), store.PathFor(10) + ".moved");
  ASSERT_TRUE(store.Save(30, *second).ok());
  EXPECT_FALSE(std::filesystem::exists(store.PathFor(10) + ".moved"));
  EXPECT_EQ(store.Steps(), (std::vector<int64_t>{20, 30}));
}

TEST_F(CheckpointStoreTest, LoadRestoresTheSavedState) {
  CheckpointStore store(spec_, "dc-b", *Env::Default());
  auto saved = Stage(1);
  ASSERT_TRUE(store.Save(10, *saved).ok());
  auto loaded = Stage(1);
  std::vector<float> zeros(saved->Params()->size(), 0.0f);
  ASSERT_TRUE(loaded->SetParams(zeros).ok());
  ASSERT_TRUE(store.Load(10, *loaded).ok());
  EXPECT_EQ(*loaded->Params(), *saved->Params());
  absl::Status missing = store.Load(20, *loaded);
  EXPECT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("cannot roll back to step 20"), std::string::npos) << missing;
}

// The same store on an in-memory Env (tests/unit/core/mem_env.h): no disk.
class CheckpointStoreInMemoryTest : public CheckpointStoreTest {
 protected:
  CheckpointStoreInMemoryTest() { spec_.training.checkpoint.dir = "/ckpt"; }
  testing::MemEnv env_;
};

TEST_F(CheckpointStoreInMemoryTest, SavesPrunesAndFindsTheNewestValid) {
  CheckpointStore store(spec_, "dc-a", env_);
  auto stage = Stage(1);
  for (int step : {10, 20, 30}) ASSERT_TRUE(store.Save(step, *stage).ok());
  EXPECT_EQ(store.Steps(), (std::vector<int64_t>{20, 30}));
  EXPECT_FALSE(env_.FileExists(store.PathFor(10)));
  EXPECT_TRUE(env_.FileExists(store.PathFor(30)));
  // Neither a temporary, nor a .moved or .outer file, nor another name is a checkpoint.
  for (const std::string& other : {store.PathFor(40) + ".tmp.7", store.PathFor(20) + ".moved",
                                   store.dir() + "/step-1.ckpt", store.dir() + "/notes.txt"}) {
    ASSERT_TRUE(env_.WriteFileAtomically(other, "x").ok());
  }
  EXPECT_EQ(store.Steps(), (std::vector<int64_t>{20, 30}));
  EXPECT_EQ(*store.NewestValid(*stage), 30);
  // A damaged newest file is skipped for the one before.
  const std::string bytes = *env_.ReadFile(store.PathFor(30));
  ASSERT_TRUE(env_.WriteFileAtomically(store.PathFor(30), bytes.substr(0, 100)).ok());
  EXPECT_EQ(*store.NewestValid(*stage), 20);
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 1;
  ASSERT_TRUE(env_.WriteFileAtomically(store.PathFor(30), flipped).ok());
  EXPECT_EQ(*store.NewestValid(*stage), 20);
  ASSERT_TRUE(env_.WriteFileAtomically(store.PathFor(20), "").ok());
  EXPECT_EQ(store.NewestValid(*stage).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CheckpointStoreInMemoryTest, PruningTakesTheMovedAndOuterFilesAlong) {
  CheckpointStore store(spec_, "dc-a", env_);
  auto stage = Stage(1);
  const std::vector<float> outer(5, 0.5f);
  ASSERT_TRUE(store.Save(10, *stage, &outer).ok());
  EXPECT_EQ(*store.LoadOuterState(10), outer);
  ASSERT_TRUE(env_.RenameFile(store.PathFor(10), store.PathFor(10) + ".moved").ok());
  ASSERT_TRUE(store.Save(10, *stage).ok());
  for (int step : {20, 30}) ASSERT_TRUE(store.Save(step, *stage).ok());
  for (const char* suffix : {"", ".moved", ".outer"}) {
    EXPECT_FALSE(env_.FileExists(store.PathFor(10) + suffix)) << suffix;
  }
  EXPECT_EQ(store.LoadOuterState(20).status().code(), absl::StatusCode::kNotFound);
}

// A full disk: the save fails with the OS's reason, and the checkpoint before stays the newest one
// that loads.
TEST_F(CheckpointStoreInMemoryTest, AFailedWriteLeavesThePreviousCheckpoint) {
  CheckpointStore store(spec_, "dc-a", env_);
  auto saved = Stage(1);
  ASSERT_TRUE(store.Save(10, *saved).ok());
  env_.FailWritesUnder(store.dir());
  const absl::Status failed = store.Save(20, *saved);
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal);
  EXPECT_NE(failed.message().find("No space left"), std::string::npos) << failed;
  EXPECT_EQ(store.Steps(), (std::vector<int64_t>{10}));
  EXPECT_EQ(*store.NewestValid(*saved), 10);
  auto loaded = Stage(1);
  ASSERT_TRUE(loaded->SetParams(std::vector<float>(saved->Params()->size(), 0.0f)).ok());
  ASSERT_TRUE(store.Load(10, *loaded).ok());
  EXPECT_EQ(*loaded->Params(), *saved->Params());
  env_.FailWritesUnder("");
  ASSERT_TRUE(store.Save(20, *saved).ok());
  EXPECT_EQ(store.Steps(), (std::vector<int64_t>{10, 20}));
}

// A file of the right name that is not what its name says is refused, naming what is wrong.
TEST_F(CheckpointStoreInMemoryTest, LoadNamesTheFileAndTheProblem) {
  CheckpointStore store(spec_, "dc-b", env_);
  auto stage = Stage(1);
  ASSERT_TRUE(store.Save(20, *stage).ok());
  ASSERT_TRUE(env_.RenameFile(store.PathFor(20), store.PathFor(10)).ok());
  const absl::Status wrong_step = store.Load(10, *stage);
  EXPECT_EQ(wrong_step.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(wrong_step.message().find("holds step 20, not 10"), std::string::npos) << wrong_step;
  ASSERT_TRUE(env_.WriteFileAtomically(store.PathFor(30), "STRAITCK garbage").ok());
  const absl::Status garbage = store.Load(30, *stage);
  EXPECT_FALSE(garbage.ok());
  EXPECT_NE(garbage.message().find("cannot roll back to step 30"), std::string::npos) << garbage;
  EXPECT_EQ(store.LoadOuterState(30).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace strait::site
