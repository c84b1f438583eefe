// The gateway's planning of `layers: auto` (gateway/membership/split_planning.h): every site waits
// until the last profile is in and then all get the same split; a late caller gets it at once; a
// wait that is forgotten is answered CANCELLED once; requests that do not fit the job are refused
// with the site and the reason; the planned spec is what the gateway serves from then on.
#include "gateway/membership/split_planning.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/job_agreement.h"
#include "core/model_layout.h"

namespace strait::gateway {
namespace {

using ::testing::HasSubstr;

JobSpec Spec() {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      "name: p\nmodel: {family: mlp, input: 16, hidden: [16, 16, 16], classes: 4}\n"
      "data: {dataset: synthetic}\ntraining: {steps: 1, global_batch: 8, microbatches: 4}\n"
      "sites: [{id: a, layers: auto}, {id: b, layers: auto}, {id: c, layers: auto}]\n",
      "p.yaml", "/");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// `slowdown` times the time of a unit layer, every layer.
v1::PlanRequest Request(const JobSpec& spec, double slowdown) {
  plan::SiteProfile profile{.model = plan::ProfiledModel(spec)};
  for (const LayerLayout& l : BuildModelLayout(spec.model)) {
    profile.layers.push_back({.layer = l.index,
                              .forward_s = 1e-3 * slowdown,
                              .backward_s = 2e-3 * slowdown,
                              .param_bytes = 4 * l.param_count,
                              .optimizer_bytes = 8 * l.param_count});
  }
  v1::PlanRequest request;
  request.set_agreed_job(AgreedJobText(spec));
  *request.mutable_profile() = plan::ToProto(profile);
  request.set_round_trip_s(0.01);
  request.set_bytes_per_second(1e8);
  return request;
}

struct Answers {
  std::vector<absl::StatusOr<v1::PlanReply>> got;
  SplitPlanning::Done Collect() {
    return [this](absl::StatusOr<v1::PlanReply> a) { got.push_back(std::move(a)); };
  }
};

TEST(SplitPlanningTest, EverySiteGetsTheSameSplitOnceTheLastProfileIsIn) {
  const JobSpec spec = Spec();
  SplitPlanning planning(spec);
  Answers a, b, c, late;
  planning.Submit("a", Request(spec, 1), a.Collect());
  planning.Submit("b", Request(spec, 4), b.Collect());
  EXPECT_TRUE(a.got.empty() && b.got.empty());
  EXPECT_THAT(planning.Description().front(), HasSubstr("waiting for the profiles of c"));
  planning.Submit("c", Request(spec, 1), c.Collect());
  ASSERT_EQ(a.got.size(), 1u);
  ASSERT_TRUE(a.got[0].ok()) << a.got[0].status();
  ASSERT_TRUE(b.got[0].ok() && c.got[0].ok());
  EXPECT_EQ(a.got[0]->DebugString(), c.got[0]->DebugString());
  ASSERT_EQ(a.got[0]->layers_size(), 3);
  // The slow site b gets the fewest layers.
  const auto size = [&](int s) { return a.got[0]->layers(s).end() - a.got[0]->layers(s).start(); };
  EXPECT_LE(size(1), size(0));
  EXPECT_LE(size(1), size(2));
  EXPECT_THAT(planning.Description().front(), HasSubstr("planned split ["));
  // A site that calls again (it restarted) gets the same plan at once.
  planning.Submit("b", Request(spec, 1), late.Collect());
  ASSERT_EQ(late.got.size(), 1u);
  EXPECT_EQ(late.got[0]->DebugString(), a.got[0]->DebugString());
  absl::StatusOr<plan::SplitChoice> planned = planning.WaitForPlan([] { return false; });
  ASSERT_TRUE(planned.ok());
  ASSERT_EQ(planned->layers.size(), 3u);  // Every site's range.
  EXPECT_EQ(planned->layers[1].start, static_cast<int>(a.got[0]->layers(1).start()));
}

// A site that calls again with a profile more than gateway.replan_share slower or faster makes the
// planner plan again: it gets the new split, and so does OnReplan's handler; a smaller change keeps
// the split and calls nobody.
TEST(SplitPlanningTest, ASiteBackAtAnotherSpeedGetsTheSplitPlannedAgain) {
  const JobSpec spec = Spec();
  SplitPlanning planning(spec);
  std::vector<std::vector<LayerRange>> replans;
  planning.OnReplan([&](const std::vector<LayerRange>& split) { replans.push_back(split); });
  Answers a, b, c, same, slower;
  planning.Submit("a", Request(spec, 1), a.Collect());
  planning.Submit("b", Request(spec, 1), b.Collect());
  planning.Submit("c", Request(spec, 1), c.Collect());
  ASSERT_TRUE(a.got[0].ok());
  planning.Submit("c", Request(spec, 1.2), same.Collect());  // 20%: within replan_share 0.25.
  EXPECT_TRUE(replans.empty());
  EXPECT_EQ(same.got[0]->DebugString(), a.got[0]->DebugString());
  // Changes of 20% at a time add up: each is compared with the profile the split was last planned
  // with (a re-plan that keeps the split counts).
  for (double slowdown = 1.44; slowdown < 50 && replans.empty(); slowdown *= 1.2) {
    planning.Submit("c", Request(spec, slowdown), slower.Collect());
  }
  ASSERT_EQ(replans.size(), 1u);
  ASSERT_TRUE(slower.got.back().ok());
  const v1::PlanReply& replanned = *slower.got.back();
  ASSERT_EQ(replanned.layers_size(), 3);
  EXPECT_EQ(replanned.layers(2).end() - replanned.layers(2).start(), 1);  // c: one layer
  EXPECT_EQ(replans[0][2].end - replans[0][2].start, 1);
  EXPECT_EQ(replanned.extra_in_flight(), a.got[0]->extra_in_flight());
  absl::StatusOr<plan::SplitChoice> planned = planning.WaitForPlan([] { return false; });
  ASSERT_TRUE(planned.ok());
  EXPECT_EQ(planned->layers[2], replans[0][2]);
  EXPECT_TRUE(spec.SplitMayMove());
}

TEST(SplitPlanningTest, AForgottenWaitIsAnsweredOnceAndItsProfileStays) {
  const JobSpec spec = Spec();
  SplitPlanning planning(spec);
  Answers a, b, c;
  const uint64_t ticket = planning.Submit("a", Request(spec, 1), a.Collect());
  planning.Forget(ticket);
  planning.Forget(ticket);
  ASSERT_EQ(a.got.size(), 1u);
  EXPECT_EQ(a.got[0].status().code(), absl::StatusCode::kCancelled);
  planning.Submit("b", Request(spec, 1), b.Collect());
  planning.Submit("c", Request(spec, 1), c.Collect());  // a's profile counts still.
  ASSERT_EQ(c.got.size(), 1u);
  EXPECT_TRUE(c.got[0].ok()) << c.got[0].status();
  EXPECT_EQ(a.got.size(), 1u);
}

TEST(SplitPlanningTest, RefusesRequestsThatDoNotFitTheJob) {
  const JobSpec spec = Spec();
  SplitPlanning planning(spec);
  auto refusal = [&](const std::string& site, const v1::PlanRequest& request) {
    Answers answers;
    planning.Submit(site, request, answers.Collect());
    EXPECT_EQ(answers.got.size(), 1u);
    return answers.got.empty() ? std::string() : std::string(answers.got[0].status().message());
  };
  EXPECT_THAT(refusal("z", Request(spec, 1)), HasSubstr("site 'z' is not in the job spec"));
  v1::PlanRequest other = Request(spec, 1);
  other.set_agreed_job("name: q\n");
  EXPECT_THAT(refusal("a", other), HasSubstr("runs another job spec than the gateway"));
  v1::PlanRequest model = Request(spec, 1);
  model.mutable_profile()->set_model("mlp 2 layers");
  EXPECT_THAT(refusal("a", model), HasSubstr("sent a profile of another model"));
  v1::PlanRequest link = Request(spec, 1);
  link.set_bytes_per_second(-5);
  EXPECT_THAT(refusal("a", link), HasSubstr("rate of -5"));
  EXPECT_THAT(planning.Description().front(), HasSubstr("waiting for the profiles of a, b, c"));
}

}  // namespace
}  // namespace strait::gateway
