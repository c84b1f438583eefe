// The split planner (plan/split_planner.h) against brute force: the plan is the fastest of every
// contiguous split the model predicts, pinned ranges stay, memory limits hold, the pruned search
// finds the exhaustive search's split, and every bad input is refused with the site to fix. Also
// `layers: auto` in the job spec and the profile file format (plan/site_profile.h).
#include "plan/split_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/model_layout.h"
#include "plan/split_costs.h"

namespace strait::plan {
namespace {

using ::testing::HasSubstr;

// An MLP of 8 layers over 3 sites, some of them auto.
JobSpec Spec(const std::string& sites, const std::string& training = "") {
  const std::string text = R"(
name: plan
model: {family: mlp, input: 64, hidden: [64, 64, 64, 64, 64, 64, 64], classes: 4}
data: {dataset: synthetic}
training: {steps: 10, global_batch: 64, microbatches: 8)" +
                           training + R"(}
sites: )" + sites;
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "plan.yaml", "/fed");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

const char kAllAuto[] = "[{id: a, layers: auto}, {id: b, layers: auto}, {id: c, layers: auto}]";

// Every layer costs `ms` forward and twice that backward on a site `slowdown` times slower.
SiteProfile Profile(const JobSpec& spec, const std::string& site, double slowdown,
                    int64_t memory = 0) {
  SiteProfile p{.site = site, .model = ProfiledModel(spec), .memory_bytes = memory};
  const std::vector<LayerLayout> layout = BuildModelLayout(spec.model);
  for (const LayerLayout& l : layout) {
    const double ms = 1e-3 * slowdown * (l.param_count > 0 ? 1.0 : 0.1);
    p.layers.push_back({.layer = l.index,
                        .forward_s = ms,
                        .backward_s = 2 * ms,
                        .update_s = ms / 10,
                        .param_bytes = 4 * l.param_count,
                        .optimizer_bytes = 8 * l.param_count,
                        .microbatch_bytes = 4 * 8 * NumElements(l.out_shape)});
  }
  return p;
}

FederationProfile Profiles(const JobSpec& spec, std::vector<double> slowdowns) {
  FederationProfile f;
  for (size_t s = 0; s < spec.sites.size(); ++s) {
    f.sites.push_back(Profile(spec, spec.sites[s].id, slowdowns[s]));
  }
  return f;
}

// The fastest split of all by PredictSplit, the planner's way of breaking ties.
SplitPrediction BruteForce(const JobSpec& spec, const FederationProfile& profiles, int extra) {
  std::optional<SplitPrediction> best;
  for (const std::vector<LayerRange>& split : ContiguousSplits(spec, 1 << 20)) {
    absl::StatusOr<SplitPrediction> p = PredictSplit(spec, profiles, {split, extra});
    EXPECT_TRUE(p.ok()) << p.status();
    if (!best || p->step_s < best->step_s * (1 - 1e-9)) best = *p;
  }
  return *best;
}

TEST(SplitPlannerTest, GivesTheSlowSiteFewerLayersAndMatchesBruteForce) {
  const JobSpec spec = Spec(kAllAuto);
  const FederationProfile profiles = Profiles(spec, {1, 4, 1});
  absl::StatusOr<SplitPlan> plan = PlanSplit(spec, profiles);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->splits, 21);  // C(7, 2) ways to cut 8 layers in 3.
  EXPECT_EQ(plan->predicted, 21);
  const SplitPrediction& best = plan->ranked.front();
  EXPECT_EQ(best.choice, BruteForce(spec, profiles, 0).choice);
  EXPECT_LT(best.choice.layers[1].size(), best.choice.layers[0].size());
  EXPECT_LT(best.choice.layers[1].size(), best.choice.layers[2].size());
  ASSERT_TRUE(plan->even.has_value());
  EXPECT_EQ(SplitToString(plan->even->choice.layers), "[0, 3) [3, 6) [6, 8)");
  EXPECT_LT(best.step_s, plan->even->step_s);
  EXPECT_EQ(plan->ranked.size(), 4u);  // The plan and three runner-ups, slower or as fast.
  for (size_t i = 1; i < plan->ranked.size(); ++i) {
    EXPECT_GE(plan->ranked[i].step_s, plan->ranked[i - 1].step_s * (1 - 1e-9));
  }
  EXPECT_THAT(best.limited_by, HasSubstr("compute of"));
  EXPECT_DOUBLE_EQ(best.samples_per_s, 64 / best.step_s);
}

TEST(SplitPlannerTest, KeepsPinnedRanges) {
  const JobSpec spec =
      Spec("[{id: a, layers: auto}, {id: b, layers: [2, 3]}, {id: c, layers: auto}]");
  const FederationProfile profiles = Profiles(spec, {1, 1, 1});
  absl::StatusOr<SplitPlan> plan = PlanSplit(spec, profiles);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->splits, 1);
  EXPECT_EQ(SplitToString(plan->ranked.front().choice.layers), "[0, 2) [2, 3) [3, 8)");
  const JobSpec partly =
      Spec("[{id: a, layers: [0, 1]}, {id: b, layers: auto}, {id: c, layers: auto}]");
  plan = PlanSplit(partly, Profiles(partly, {1, 1, 1}));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->splits, 6);  // The cut between b and c: after layer 1 .. 6.
  EXPECT_EQ(plan->ranked.front().choice.layers[0].end, 1);
}

TEST(SplitPlannerTest, PrunedSearchFindsTheExhaustiveSplit) {
  const JobSpec spec = Spec(
      "[{id: a, layers: auto}, {id: b, layers: auto}, {id: c, layers: auto}, "
      "{id: d, layers: auto}]");
  FederationProfile profiles = Profiles(spec, {1, 3, 0.5, 2});
  profiles.links.push_back({.site = "b", .round_trip_s = 0.01, .bytes_per_second = 5e6});
  absl::StatusOr<SplitPlan> exhaustive = PlanSplit(spec, profiles);
  absl::StatusOr<SplitPlan> pruned = PlanSplit(spec, profiles, {.exhaustive_limit = 5});
  ASSERT_TRUE(exhaustive.ok() && pruned.ok());
  EXPECT_EQ(exhaustive->predicted, 35);  // C(7, 3)
  EXPECT_LT(pruned->predicted, 35);
  EXPECT_EQ(pruned->ranked.front().choice, exhaustive->ranked.front().choice);
  EXPECT_THAT(pruned->notes.back(), HasSubstr("least bottleneck"));
}

TEST(SplitPlannerTest, CountsAndPrunesALargeSearchWithoutWalkingIt) {
  // 98 layers on 8 sites: C(97, 7) = 1.3e10 splits, far too many to predict one by one.
  std::string hidden = "8";
  for (int i = 1; i < 97; ++i) hidden += ", 8";
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      "name: big\nmodel: {family: mlp, input: 8, hidden: [" + hidden +
          "], classes: 2}\n"
          "data: {dataset: synthetic}\ntraining: {steps: 1, global_batch: 8, microbatches: 8}\n"
          "sites: [{id: a, layers: auto}, {id: b, layers: auto}, {id: c, layers: auto}, "
          "{id: d, layers: auto}, {id: e, layers: auto}, {id: f, layers: auto}, "
          "{id: g, layers: auto}, {id: h, layers: auto}]\n",
      "big.yaml", "/");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const FederationProfile profiles = Profiles(*spec, {1, 2, 1, 1, 3, 1, 1, 1});
  absl::StatusOr<SplitPlan> plan = PlanSplit(*spec, profiles, {.bottleneck_slack = 0.05});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->splits, 12846240784);  // C(97, 7)
  EXPECT_GT(plan->predicted, 0);  // The least bottlenecks among them, at most exhaustive_limit.
  EXPECT_LE(plan->predicted, 1000);
  // The slow sites (b: 2x, e: 3x) get fewer layers than a site at full speed.
  const std::vector<LayerRange>& split = plan->ranked.front().choice.layers;
  EXPECT_LT(split[4].size(), split[3].size());
  EXPECT_LT(split[1].size(), split[2].size());
}

TEST(SplitPlannerTest, AutoInFlightCoversASlowLinkWithTheLeastThatHelps) {
  const JobSpec fixed = Spec(kAllAuto);
  const JobSpec automatic = Spec(kAllAuto, ", extra_in_flight: auto");
  FederationProfile profiles = Profiles(fixed, {1, 1, 1});
  profiles.links.push_back({.site = "c", .round_trip_s = 0.05, .bytes_per_second = 0});
  absl::StatusOr<SplitPlan> plain = PlanSplit(fixed, profiles);
  absl::StatusOr<SplitPlan> deeper = PlanSplit(automatic, profiles);
  ASSERT_TRUE(plain.ok() && deeper.ok());
  EXPECT_EQ(plain->ranked.front().choice.extra_in_flight, 0);
  const SplitPrediction& best = deeper->ranked.front();
  EXPECT_GT(best.choice.extra_in_flight, 0);
  EXPECT_LT(best.step_s, plain->ranked.front().step_s);
  // One fewer in flight would be slower: it is the least that helps.
  absl::StatusOr<SplitPrediction> less =
      PredictSplit(automatic, profiles, {best.choice.layers, best.choice.extra_in_flight - 1});
  ASSERT_TRUE(less.ok());
  EXPECT_GT(less->step_s, best.step_s * 1.01);
}

TEST(SplitPlannerTest, RespectsMemoryAndSaysWhoCannotFit) {
  const JobSpec spec = Spec(kAllAuto);
  FederationProfile profiles = Profiles(spec, {1, 1, 1});
  // A 64 x 64 layer needs 66560 bytes of weights, gradients and AdamW state, and 2048 per
  // microbatch in flight (two on b): room for one layer on b.
  const int64_t one_layer = 72000;
  profiles.sites[1].memory_bytes = one_layer;
  absl::StatusOr<SplitPlan> plan = PlanSplit(spec, profiles);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->ranked.front().choice.layers[1].size(), 1);
  EXPECT_LE(plan->ranked.front().memory_bytes[1], one_layer);
  EXPECT_FALSE(plan->even.has_value());  // Three layers on b do not fit.
  profiles.sites[1].memory_bytes = 1000;
  plan = PlanSplit(spec, profiles);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("no split of the 8 layers fits"));
  EXPECT_THAT(plan.status().message(), HasSubstr("site 'b' has 0.0 MiB"));
}

TEST(SplitPlannerTest, RefusesMissingAndForeignProfiles) {
  const JobSpec spec = Spec(kAllAuto);
  FederationProfile profiles = Profiles(spec, {1, 1, 1});
  profiles.sites.pop_back();
  absl::StatusOr<SplitPlan> plan = PlanSplit(spec, profiles);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("no profile of site 'c'"));
  EXPECT_THAT(plan.status().message(), HasSubstr("strait profile --config plan.yaml --site c"));
  profiles = Profiles(spec, {1, 1, 1});
  profiles.sites[1].model = "mlp 3 layers 1234 params mb 8 adamw fp32 #00000000";
  plan = PlanSplit(spec, profiles);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(),
              HasSubstr("the profile of site 'b' was measured for another model"));
}

TEST(SplitPlannerTest, WithSplitGivesEverySiteItsRange) {
  const JobSpec spec = Spec(kAllAuto, ", extra_in_flight: auto");
  const SplitChoice choice{{{0, 2}, {2, 3}, {3, 8}}, 2};
  const JobView planned = WithSplit(choice, /*replica=*/1);
  EXPECT_TRUE(planned.planned);
  EXPECT_EQ(planned.replica, 1);
  ASSERT_EQ(planned.split.size(), spec.sites.size());  // Every site's range.
  EXPECT_EQ(planned.Layers(2).start, 3);
  const JobSpec settled = WithPlannedInFlight(spec, choice);
  EXPECT_EQ(settled.training.extra_in_flight, 2);
  EXPECT_FALSE(settled.training.plan_extra_in_flight);
  EXPECT_TRUE(settled.PlansSplit());  // The spec stays as written: layers: auto.
}

TEST(SplitPlannerTest, JobSpecChecksAutoRanges) {
  auto error = [](const std::string& sites, const std::string& training = "") {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(
        "name: p\nmodel: {family: mlp, input: 8, hidden: [8, 8], classes: 2}\n"
        "data: {dataset: synthetic}\ntraining: {steps: 1" +
            training + "}\nsites: " + sites,
        "p.yaml", "/");
    return spec.ok() ? std::string("ok") : std::string(spec.status().message());
  };
  EXPECT_EQ(error("[{id: a, layers: auto}, {id: b, layers: [1, 3]}]"), "ok");
  EXPECT_THAT(error("[{id: a, layers: [0, 3]}, {id: b, layers: auto}]"),
              HasSubstr("1 site(s) with layers: auto before it (the last is 'b') get no layers"));
  EXPECT_THAT(error("[{id: a, layers: auto}, {id: b, layers: auto}, {id: c, layers: [1, 3]}]"),
              HasSubstr("the pinned ranges leave only [0, 1)"));
  EXPECT_THAT(error("[{id: a, layers: [0, 1]}, {id: b, layers: [2, 3]}]"),
              HasSubstr("leaves layers [1, 2) to no site"));
  EXPECT_THAT(
      error("[{id: a, layers: [0, 1]}, {id: b, layers: [1, 3]}]", ", extra_in_flight: auto"),
      HasSubstr("auto is chosen by the split planner"));
}

// What a codec chain sends, as the planner counts it: proj:K keeps K of a row's values.
TEST(SplitCostsTest, WireRatioCountsProjectionsByRowWidth) {
  EXPECT_DOUBLE_EQ(WireRatio("bf16"), 0.5);
  EXPECT_DOUBLE_EQ(WireRatio("int4:16"), (8.0 + 4) / 64);
  EXPECT_DOUBLE_EQ(WireRatio("proj:16+int4:16", 64), 0.25 * (8.0 + 4) / 64);
  EXPECT_DOUBLE_EQ(WireRatio("proj:16", 0), 1.0);    // width unknown
  EXPECT_DOUBLE_EQ(WireRatio("proj:128", 64), 1.0);  // K above the width keeps every value
  EXPECT_DOUBLE_EQ(WireRatio("proj:16+zstd", 64), 0.25);
}

TEST(SiteProfileTest, RoundTripsThroughJsonAndRefusesBadFields) {
  const JobSpec spec = Spec(kAllAuto);
  FederationProfile profiles = Profiles(spec, {1, 2, 3});
  profiles.links.push_back({.site = "b", .round_trip_s = 0.15, .bytes_per_second = 1.25e7});
  absl::StatusOr<FederationProfile> back =
      ParseFederationProfile(FederationProfileToJson(profiles), "p.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(FederationProfileToJson(*back), FederationProfileToJson(profiles));
  EXPECT_THAT(ParseFederationProfile("[1]", "p.json").status().message(),
              HasSubstr("p.json: not a JSON object"));
  EXPECT_THAT(ParseFederationProfile(R"({"sites": [{"site": "a", "model": "m", "memory_bytes": 0,
      "layers": [{"layer": 1}]}]})",
                                     "p.json")
                  .status()
                  .message(),
              HasSubstr("p.json: sites[0].layers[0].layer: expected 0"));
  EXPECT_THAT(ParseFederationProfile(R"({"links": [{"site": "a", "round_trip_s": -1}]})", "p.json")
                  .status()
                  .message(),
              HasSubstr("links[0].round_trip_s: expected a number >= 0, found -1"));
  EXPECT_THAT(
      ParseFederationProfile(
          R"({"links": [{"site": "a", "round_trip_s": 0.1, "bytes_per_second": 0.5}]})", "p.json")
          .status()
          .message(),
      HasSubstr("expected 0 (not limited) or 1 to 1e15"));
  // From the network: every value is checked.
  v1::MeasuredSite message = ToProto(profiles.sites[0]);
  absl::StatusOr<SiteProfile> decoded = FromProto(message, "a");
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->layers.size(), profiles.sites[0].layers.size());
  EXPECT_DOUBLE_EQ(decoded->layers[3].backward_s, profiles.sites[0].layers[3].backward_s);
  message.mutable_layers(2)->set_forward_s(std::nan(""));
  EXPECT_THAT(FromProto(message, "a").status().message(),
              HasSubstr("gives layer 2 a time of nan s"));
  message.mutable_layers(2)->set_forward_s(-1);
  EXPECT_FALSE(FromProto(message, "a").ok());
  EXPECT_FALSE(CheckMeasuredLink({.site = "a", .round_trip_s = std::nan("")}).ok());
  EXPECT_TRUE(
      CheckMeasuredLink({.site = "a", .round_trip_s = 0.15, .bytes_per_second = 1.25e7}).ok());
  FederationProfile newer;
  newer.sites.push_back(Profile(spec, "b", 9));
  MergeFederationProfile(newer, &profiles);
  EXPECT_EQ(profiles.sites.size(), 3u);
  EXPECT_DOUBLE_EQ(profiles.Site("b")->layers[0].forward_s, 9e-3);
}

}  // namespace
}  // namespace strait::plan
