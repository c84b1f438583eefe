#include "core/job_agreement.h"

#include <gtest/gtest.h>

#include <set>

#include "absl/strings/str_replace.h"
#include "core/job_fields.h"
#include "core/tied_embeddings.h"

namespace strait {
namespace {

constexpr char kSpec[] = R"(name: agree
gateway: {address: 127.0.0.1:7443}
model: {family: mlp, input: 784, hidden: [32], classes: 10}
data: {dataset: synthetic, seed: 3}
training:
  steps: 10
  global_batch: 32
  microbatches: 4
  schedule: 2bw
  optimizer: {name: adamw, lr: 0.001}
  checkpoint: {dir: ckpt}
sites:
  - {id: a, layers: [0, 1]}
  - {id: b, layers: [1, 2]}
)";

JobSpec Parse(const std::string& text) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "agree.yaml", "/x");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

TEST(JobAgreementTest, WhatMayDifferBetweenTheFilesOfOneFederationDoesNotCount) {
  const std::string ours = AgreedJobText(Parse(kSpec));
  // Another gateway address (a site behind a WAN emulator), checkpoint directory and step count.
  const std::string theirs = AgreedJobText(Parse(absl::StrReplaceAll(
      kSpec, {{"7443", "9000"}, {"dir: ckpt", "dir: elsewhere"}, {"steps: 10", "epochs: 2"}})));
  EXPECT_EQ(ours, theirs);
  EXPECT_EQ(FirstDisagreement(ours, theirs, "ours"), "");
}

// A planned split may change at a rollback: sites before and after a re-plan agree. So do the keys
// that seal their MOVE frames: every site gets every other's.
TEST(JobAgreementTest, APlannedSplitAgreesWhateverItsLayers) {
  JobSpec before = Parse(kSpec), after = Parse(kSpec);
  for (JobSpec* spec : {&before, &after}) {
    for (SiteSpec& site : spec->sites) site.plan_layers = true;  // layers: auto, planned.
  }
  after.sites[0].layers = {0, 2};
  after.sites[1].layers = {2, 2};
  EXPECT_EQ(AgreedJobText(before, /*split_planned=*/true),
            AgreedJobText(after, /*split_planned=*/true));
  EXPECT_NE(AgreedJobText(before, /*split_planned=*/true), AgreedJobText(Parse(kSpec)));
  EXPECT_EQ(KeyPeers(before, 0), std::vector<int>{1});
  JobSpec three = before;
  three.sites.push_back(three.sites.back());
  three.sites.back().id = "c";
  three.links.push_back(three.links.back());
  three.links.back().encryption = false;
  EXPECT_EQ(KeyPeers(three, 0), (std::vector<int>{1, 2}));
  for (SiteSpec& site : three.sites) site.plan_layers = false;  // The file's split.
  EXPECT_EQ(KeyPeers(three, 0), std::vector<int>{1});
}

TEST(JobAgreementTest, TheFirstDifferenceIsNamedWithBothValues) {
  const std::string ours = AgreedJobText(Parse(kSpec));
  EXPECT_EQ(
      FirstDisagreement(
          ours, AgreedJobText(Parse(absl::StrReplaceAll(kSpec, {{"lr: 0.001", "lr: 0.002"}}))),
          "ours"),
      "training.optimizer.lr: 0.002 (ours: 0.001)");
  EXPECT_EQ(FirstDisagreement(ours,
                              AgreedJobText(Parse(absl::StrReplaceAll(
                                  kSpec, {{"schedule: 2bw", "schedule: 2bw\n  update: eager"}}))),
                              "ours"),
            "training.update: eager (ours: deferred)");
  EXPECT_EQ(
      FirstDisagreement(
          ours,
          AgreedJobText(Parse(absl::StrReplaceAll(kSpec, {{"hidden: [32]", "hidden: [33]"}}))),
          "ours"),
      "model.layer0: fc0+relu [784] -> [33] weight[33, 784] bias[33] (ours: fc0+relu [784] -> "
      "[32] weight[32, 784] bias[32])");
  // Sites that evaluate at other steps would wait for each other (2bw cannot evaluate: 1f1b).
  EXPECT_EQ(
      FirstDisagreement(
          AgreedJobText(Parse(absl::StrReplaceAll(kSpec, {{"2bw", "1f1b"}}))),
          AgreedJobText(Parse(absl::StrReplaceAll(kSpec, {{"2bw", "1f1b\n  eval_every: 5"}}))),
          "ours"),
      "training.eval_every: 5 (ours: 0)");
  EXPECT_EQ(FirstDisagreement("x: 1\n", "x: 1\ny: 2\n", "ours"), "y: 2 (ours: (nothing))");
}

// The field table's two halves fit: every agreed field names a line the text has, and every line
// carries some field (so the parser's check that each key has a field covers the text).
TEST(JobFieldsTest, EveryAgreedFieldNamesALineAndEveryLineCarriesAField) {
  std::set<absl::string_view> lines, named;
  for (const AgreedLine& line : AgreedLines())
    EXPECT_TRUE(lines.insert(line.key).second) << line.key;
  for (const JobField& field : JobFields()) {
    if (field.agreed_line.empty()) continue;
    EXPECT_TRUE(lines.count(field.agreed_line)) << field.path << " names " << field.agreed_line;
    named.insert(field.agreed_line);
  }
  for (absl::string_view line : lines)
    EXPECT_TRUE(named.count(line)) << line << " carries no field";
}

TEST(JobFieldsTest, ListElementsAndSectionsAreFound) {
  ASSERT_NE(FindJobField("sites[3].layers"), nullptr);
  EXPECT_EQ(FindJobField("sites[3].layers")->agreed_line, "sites");
  EXPECT_EQ(FindJobField("gateway.address")->agreed_line, "");
  EXPECT_EQ(FindJobField("training.optimizer"), nullptr);
  EXPECT_TRUE(IsJobSection("training.optimizer"));
  EXPECT_TRUE(IsJobSection("sites"));
  EXPECT_TRUE(IsJobSection("links[1]"));
  EXPECT_FALSE(IsJobSection("training.optimizer.lr"));
  EXPECT_FALSE(IsJobSection("training.nothing"));
}

}  // namespace
}  // namespace strait
