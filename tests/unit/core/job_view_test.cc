#include "core/job_view.h"

#include <gtest/gtest.h>

#include "core/job_agreement.h"
#include "core/join_request.h"

namespace strait {
namespace {

constexpr char kReplicas[] = R"(
name: views
model: {family: mlp, input: 8, hidden: [8, 8, 8], classes: 2}
data: {dataset: synthetic}
training: {steps: 4, global_batch: 8, microbatches: 2}
sites:
  - {id: a, layers: [0, 1]}
  - {id: b, layers: [1, 4]}
replicas:
  - [a, b]
  - [c, d]
)";

constexpr char kAuto[] = R"(
name: views
model: {family: mlp, input: 8, hidden: [8, 8, 8], classes: 2}
data: {dataset: synthetic}
training: {steps: 4, global_batch: 8, microbatches: 2}
sites:
  - {id: a, layers: auto}
  - {id: b, layers: auto}
)";

JobSpec Parse(const char* text) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "views.yaml", "/x");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// A replica's view names its own pipeline's sites and runs the stages' layers as the file writes
// them; the spec itself is the same for every replica.
TEST(JobViewTest, AReplicasViewNamesItsSitesWithTheFilesLayers) {
  const JobSpec spec = Parse(kReplicas);
  const JobView first = JobView::Initial(spec), second = JobView::Initial(spec, 1);
  EXPECT_EQ(first.replica, 0);
  EXPECT_EQ(first.SiteId(spec, 0), "a");
  EXPECT_EQ(first.SiteId(spec, 1), "b");
  EXPECT_EQ(second.replica, 1);
  EXPECT_EQ(second.SiteId(spec, 0), "c");
  EXPECT_EQ(second.SiteId(spec, 1), "d");
  EXPECT_FALSE(second.planned);
  EXPECT_EQ(second.split, (std::vector<LayerRange>{{0, 1}, {1, 4}}));
  EXPECT_EQ(second.Layers(1), (LayerRange{1, 4}));
  EXPECT_EQ(spec.sites[0].id, "a");  // Unchanged: the ids live in the view.
  // Both replicas' joins claim their layers and agree on the job.
  const v1::JoinRequest join = JoinRequestFor(spec, second, 1, UnsignedKey("d", 1));
  EXPECT_EQ(join.layers().start(), 1u);
  EXPECT_EQ(join.layers().end(), 4u);
  EXPECT_EQ(join.agreed_job(), JoinRequestFor(spec, first, 1, UnsignedKey("b", 1)).agreed_job());
}

// `layers: auto`: the file's view has empty ranges; a planned view carries the planner's, and its
// joins say "planned" whatever the layers, so a re-plan keeps the agreement.
TEST(JobViewTest, APlannedSplitLivesInTheViewNotInTheSpec) {
  const JobSpec spec = Parse(kAuto);
  ASSERT_TRUE(spec.SplitMayMove());
  const JobView file = JobView::Initial(spec);
  EXPECT_EQ(file.Layers(0).size(), 0);
  EXPECT_EQ(file.Layers(1).size(), 0);
  const JobView planned{.split = {{0, 3}, {3, 4}}, .planned = true};
  JobView replanned = planned;
  replanned.split = {{0, 1}, {1, 4}};
  const v1::JoinRequest join = JoinRequestFor(spec, planned, 0, UnsignedKey("a", 1));
  EXPECT_EQ(join.layers().end(), 3u);
  EXPECT_EQ(join.agreed_job(),
            JoinRequestFor(spec, replanned, 0, UnsignedKey("a", 1)).agreed_job());
  EXPECT_EQ(join.agreed_job(), AgreedJobText(spec, /*split_planned=*/true));
  EXPECT_NE(join.agreed_job(), AgreedJobText(spec));  // Before the plan: "layers auto".
  EXPECT_NE(AgreedJobText(spec, true).find("sites.a: layers planned"), std::string::npos);
  EXPECT_NE(AgreedJobText(spec).find("sites.a: layers auto"), std::string::npos);
  EXPECT_TRUE(spec.sites[0].plan_layers);  // The spec stays as written.
  EXPECT_EQ(spec.sites[0].layers.size(), 0);
}

}  // namespace
}  // namespace strait
