// CheckpointStore: where a site's coordinated checkpoints go, which are kept, and which one
// --resume may use (DESIGN.md §7).
#include "site/daemon/checkpoint_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "harness/subprocess.h"

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
  CheckpointStore store(spec_, "dc-a");
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
  CheckpointStore store(spec_, "dc-a");
  auto stage = Stage(1);
  for (int step : {10, 20}) ASSERT_TRUE(store.Save(step, *stage).ok());
  EXPECT_EQ(*store.NewestValid(*stage), 20);
  std::filesystem::resize_file(store.PathFor(20), 100);  // Truncated.
  EXPECT_EQ(*store.NewestValid(*stage), 10);
  // Another job's seeds: refused, and nothing else is left.
  CheckpointStore other(spec_, "dc-a");
  auto foreign = Stage(2);
  EXPECT_EQ(other.NewestValid(*foreign).status().code(), absl::StatusCode::kNotFound);
}

// A planned split's site may offer a checkpoint of other layers (they move at the rollback:
// site/daemon/layer_moves.h); a fixed split's may not. The checkpoint it trained before a move
// goes with it when it is too old to keep.
TEST_F(CheckpointStoreTest, APlannedSplitOffersCheckpointsOfOtherLayers) {
  CheckpointStore store(spec_, "dc-a");
  auto first = Stage(1, {0, 1});
  for (int step : {10, 20}) ASSERT_TRUE(store.Save(step, *first).ok());
  auto second = Stage(1, {1, 2});
  EXPECT_EQ(store.NewestValid(*second).status().code(), absl::StatusCode::kNotFound);
  spec_.split_planned = true;
  EXPECT_EQ(*store.NewestValid(*second), 20);
  std::filesystem::copy_file(store.PathFor(10), store.PathFor(10) + ".moved");
  ASSERT_TRUE(store.Save(30, *second).ok());
  EXPECT_FALSE(std::filesystem::exists(store.PathFor(10) + ".moved"));
  EXPECT_EQ(store.Steps(), (std::vector<int64_t>{20, 30}));
}

TEST_F(CheckpointStoreTest, LoadRestoresTheSavedState) {
  CheckpointStore store(spec_, "dc-b");
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

}  // namespace
}  // namespace strait::site
