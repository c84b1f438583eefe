// Every example federation in configs/ must load and split the model sensibly.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/job_spec.h"
#include "core/model_layout.h"

namespace strait {
namespace {

TEST(ConfigsTest, EveryExampleLoads) {
  int count = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::filesystem::path(STRAIT_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    absl::StatusOr<JobSpec> spec = LoadJobSpec(entry.path().string());
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->links.size() + 1, spec->sites.size());
    // A planned split (layers: auto) has no ranges until the gateway plans it.
    if (!spec->PlansSplit()) {
      EXPECT_EQ(spec->sites.back().layers.end, spec->model.NumLayers());
    }
    EXPECT_EQ(BuildModelLayout(spec->model).size(), static_cast<size_t>(spec->model.NumLayers()));
    ++count;
  }
  EXPECT_GE(count, 3);
}

TEST(ConfigsTest, ThreeSiteMlpIsTheIssuesModel) {
  absl::StatusOr<JobSpec> spec =
      LoadJobSpec(std::string(STRAIT_SOURCE_DIR) + "/configs/fashion-mlp-3site.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.mlp.input, 784);
  EXPECT_EQ(spec->model.mlp.hidden, (std::vector<int>{1024, 1024, 1024, 1024}));
  EXPECT_EQ(spec->model.mlp.classes, 10);
  EXPECT_EQ(spec->sites.size(), 3u);
}

TEST(ConfigsTest, VitHasAtLeastFourBlocks) {
  absl::StatusOr<JobSpec> spec =
      LoadJobSpec(std::string(STRAIT_SOURCE_DIR) + "/configs/fashion-vit-3site.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.family, ModelFamily::kVit);
  EXPECT_GE(spec->model.vit.depth, 4);
}

}  // namespace
}  // namespace strait
