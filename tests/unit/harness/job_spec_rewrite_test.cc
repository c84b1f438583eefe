// RewriteJobSpec: the job spec `strait demo` and `strait bench e2e` run in their own work
// directory.
#include "harness/job_spec_rewrite.h"

#include <gtest/gtest.h>

#include "core/job_spec.h"

namespace strait::harness {
namespace {

const std::string kConfig = std::string(STRAIT_SOURCE_DIR) + "/configs/fashion-mlp-3site.yaml";

JobSpec Reload(const RewrittenJobSpec& rewritten) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(rewritten.yaml, "rewritten.yaml", "/work/dir");
  EXPECT_TRUE(spec.ok()) << spec.status() << "\n" << rewritten.yaml;
  return spec.ok() ? *spec : JobSpec{};
}

TEST(JobSpecRewriteTest, WithoutOverridesOnlyPathsChange) {
  absl::StatusOr<RewrittenJobSpec> yaml = RewriteJobSpec(kConfig, {});
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  absl::StatusOr<JobSpec> original = LoadJobSpec(kConfig);
  ASSERT_TRUE(original.ok());
  JobSpec spec = Reload(*yaml);
  EXPECT_EQ(spec.name, original->name);
  EXPECT_EQ(spec.training.epochs, original->training.epochs);
  EXPECT_EQ(spec.sites.size(), original->sites.size());
  EXPECT_EQ(spec.model.mlp.hidden, original->model.mlp.hidden);
  // The dataset is where the original said; certificates and checkpoints are the work directory's.
  EXPECT_EQ(spec.data.path, original->data.path);
  EXPECT_EQ(spec.tls.ca, "/work/dir/certs/ca.pem");
  EXPECT_EQ(spec.tls.SiteCert("dc-b"), "/work/dir/certs/dc-b.pem");
  EXPECT_EQ(spec.training.checkpoint.dir, "/work/dir/checkpoints");
  for (size_t b = 0; b < spec.links.size(); ++b) {
    EXPECT_EQ(spec.links[b].forward, original->links[b].forward);
    EXPECT_TRUE(spec.links[b].encryption);
  }
}

TEST(JobSpecRewriteTest, ATokenizerModelStaysWhereTheOriginalSaid) {
  const std::string config = std::string(STRAIT_SOURCE_DIR) + "/configs/kjv-gpt-bpe-3site.yaml";
  absl::StatusOr<RewrittenJobSpec> yaml = RewriteJobSpec(config, {});
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  absl::StatusOr<JobSpec> original = LoadJobSpec(config);
  ASSERT_TRUE(original.ok());
  EXPECT_EQ(original->data.tokenizer, std::string(STRAIT_SOURCE_DIR) + "/data/kjv-4096.model");
  EXPECT_EQ(Reload(*yaml).data.tokenizer, original->data.tokenizer);
  EXPECT_EQ(Reload(*RewriteJobSpec(kConfig, {})).data.tokenizer, "bytes");
}

TEST(JobSpecRewriteTest, StepsAndCodecsOverride) {
  JobSpecOverrides o;
  o.steps = 12;
  o.codec = "int8+zstd";      // Both directions...
  o.backward_codec = "bf16";  // ...but this one.
  absl::StatusOr<RewrittenJobSpec> yaml = RewriteJobSpec(kConfig, o);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  JobSpec spec = Reload(*yaml);
  EXPECT_EQ(yaml->spec.training.steps, 12);
  EXPECT_EQ(spec.training.steps, 12);
  EXPECT_EQ(spec.training.epochs, 0);
  ASSERT_EQ(spec.links.size(), 2u);
  for (const LinkSpec& l : spec.links) {
    EXPECT_EQ(l.forward, "int8+zstd");
    EXPECT_EQ(l.backward, "bf16");
    EXPECT_TRUE(l.encryption);
  }
}

TEST(JobSpecRewriteTest, BatchAndScheduleOverride) {
  JobSpecOverrides o;
  o.global_batch = 1024;
  o.microbatches = 32;
  o.schedule = "gpipe";
  absl::StatusOr<RewrittenJobSpec> yaml = RewriteJobSpec(kConfig, o);
  ASSERT_TRUE(yaml.ok()) << yaml.status();
  JobSpec spec = Reload(*yaml);
  EXPECT_EQ(spec.training.global_batch, 1024);
  EXPECT_EQ(spec.training.microbatches, 32);
  EXPECT_EQ(spec.training.schedule, Schedule::kGPipe);
  o.schedule = "2bw";
  o.update = "eager";
  spec = Reload(*RewriteJobSpec(kConfig, o));
  EXPECT_EQ(spec.training.update, UpdateTiming::kEager);
  o.stale_gradients = "drop";
  o.grad_clip = 0.5;
  spec = Reload(*RewriteJobSpec(kConfig, o));
  EXPECT_EQ(spec.training.stale_gradients, StaleGradients::kDrop);
  EXPECT_DOUBLE_EQ(spec.training.grad_clip, 0.5);
  o.stale_gradients.clear();
  o.schedule = "gpipe";
  EXPECT_FALSE(RewriteJobSpec(kConfig, o).ok());  // eager is for 2bw only
  o.update.clear();

  // The loader's checks still apply: a batch that microbatches do not divide is refused.
  o.global_batch = 1000;
  absl::StatusOr<RewrittenJobSpec> bad = RewriteJobSpec(kConfig, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("microbatches"), std::string::npos) << bad.status();
  o.global_batch = 0;
  o.schedule = "zigzag";
  EXPECT_FALSE(RewriteJobSpec(kConfig, o).ok());
}

// The language model's config evaluates during training, which 2bw cannot: the schedule's
// override leaves its run evaluated at the end only.
TEST(JobSpecRewriteTest, TwoBwDropsEvaluationsDuringTraining) {
  const std::string config = std::string(STRAIT_SOURCE_DIR) + "/configs/kjv-gpt-3site.yaml";
  absl::StatusOr<RewrittenJobSpec> kept = RewriteJobSpec(config, {.schedule = "gpipe"});
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(Reload(*kept).training.eval_every, 100);
  absl::StatusOr<RewrittenJobSpec> dropped = RewriteJobSpec(config, {.schedule = "2bw"});
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_EQ(Reload(*dropped).training.schedule, Schedule::k2BW);
  EXPECT_EQ(Reload(*dropped).training.eval_every, 0);
}

TEST(JobSpecRewriteTest, BadInputIsAClearError) {
  JobSpecOverrides o;
  o.forward_codec = "int9";
  absl::StatusOr<RewrittenJobSpec> yaml = RewriteJobSpec(kConfig, o);
  ASSERT_FALSE(yaml.ok());
  EXPECT_EQ(yaml.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(yaml.status().message().find("forward codec 'int9'"), std::string::npos)
      << yaml.status();

  absl::StatusOr<RewrittenJobSpec> missing = RewriteJobSpec("/nonexistent/fed.yaml", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/fed.yaml"), std::string::npos);
}

}  // namespace
}  // namespace strait::harness
