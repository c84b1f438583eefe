#include "core/job_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/job_agreement.h"
#include "core/job_view.h"
#include "core/join_request.h"

namespace strait {
namespace {

constexpr char kFull[] = R"(
name: unit-fed
gateway:
  address: gw.example.org:9000
  listen: 0.0.0.0:9000
  memory_budget: 64MiB
  heartbeat_timeout: 1500ms
dashboard:
  address: "[::1]:8081"
  token_file: secrets/token
tls:
  ca: /etc/strait/ca.pem
  site_cert: certs/{site}/cert.pem
model:
  family: mlp
  input: 784
  hidden: [32, 16]
  classes: 10
  activation: gelu
  dropout: 0.1
  init_seed: 99
data:
  dataset: fashion-mnist
  path: ../data
  seed: 5
training:
  epochs: 2
  global_batch: 64
  microbatches: 8
  schedule: gpipe
  optimizer: {name: sgd, lr: 0.05, momentum: 0.8, weight_decay: 0.0001, warmup_steps: 20,
              decay: cosine, decay_steps: 300}
  grad_clip: 2.5
  checkpoint: {every: 10, dir: ckpt, keep: 2}
sites:
  - {id: dc-a, layers: [0, 1], device: cuda, workers: 2}
  - {id: dc-b, layers: [1, 3]}
links:
  - between: [dc-a, dc-b]
    forward: int8:128:sr+zstd:3
    backward: topk:0.01:ef
    encryption: false
    rotate_bytes: 1GiB
)";

TEST(JobSpecTest, ParsesEveryKey) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(kFull, "full.yaml", "/fed/conf");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "unit-fed");
  EXPECT_EQ(spec->gateway.address, "gw.example.org:9000");
  EXPECT_EQ(spec->gateway.listen, "0.0.0.0:9000");
  EXPECT_EQ(spec->gateway.memory_budget, 64u << 20);
  EXPECT_DOUBLE_EQ(spec->gateway.heartbeat_timeout_s, 1.5);
  EXPECT_EQ(spec->dashboard.address, "[::1]:8081");
  EXPECT_EQ(spec->dashboard.token_file, "/fed/conf/secrets/token");
  EXPECT_EQ(spec->tls.ca, "/etc/strait/ca.pem");
  EXPECT_EQ(spec->tls.SiteCert("dc-b"), "/fed/conf/certs/dc-b/cert.pem");
  EXPECT_EQ(spec->tls.SiteKey("dc-b"), "/fed/conf/certs/dc-b.key");  // default pattern, resolved
  EXPECT_EQ(spec->model.family, ModelFamily::kMlp);
  EXPECT_EQ(spec->model.mlp.hidden, (std::vector<int>{32, 16}));
  EXPECT_EQ(spec->model.mlp.activation, Activation::kGelu);
  EXPECT_FLOAT_EQ(spec->model.mlp.dropout, 0.1f);
  EXPECT_EQ(spec->model.init_seed, 99u);
  EXPECT_EQ(spec->model.NumLayers(), 3);
  EXPECT_EQ(spec->data.kind, DatasetKind::kFashionMnist);
  EXPECT_EQ(spec->data.path, "/fed/data");
  EXPECT_EQ(spec->data.seed, 5u);
  EXPECT_EQ(spec->training.epochs, 2);
  EXPECT_EQ(spec->training.steps, 0);
  EXPECT_EQ(spec->training.MicrobatchSize(), 8);
  EXPECT_EQ(spec->training.schedule, Schedule::kGPipe);
  EXPECT_EQ(spec->training.optimizer.kind, OptimizerKind::kSgd);
  EXPECT_DOUBLE_EQ(spec->training.optimizer.lr, 0.05);
  EXPECT_DOUBLE_EQ(spec->training.optimizer.momentum, 0.8);
  EXPECT_EQ(spec->training.optimizer.warmup_steps, 20);
  EXPECT_EQ(spec->training.optimizer.decay, LrDecay::kCosine);
  EXPECT_EQ(spec->training.optimizer.decay_steps, 300);
  EXPECT_DOUBLE_EQ(spec->training.grad_clip, 2.5);
  EXPECT_EQ(spec->training.checkpoint.every, 10);
  EXPECT_EQ(spec->training.checkpoint.dir, "/fed/conf/ckpt");
  EXPECT_EQ(spec->training.checkpoint.keep, 2);
  ASSERT_EQ(spec->sites.size(), 2u);
  EXPECT_EQ(spec->sites[0].device, DeviceKind::kCuda);
  EXPECT_EQ(spec->sites[0].workers, 2);
  EXPECT_EQ(spec->sites[1].device, DeviceKind::kCpu);
  EXPECT_EQ(spec->sites[1].workers, 1);
  EXPECT_EQ(spec->sites[1].layers.start, 1);
  EXPECT_EQ(spec->sites[1].layers.end, 3);
  EXPECT_EQ(spec->SiteIndex("dc-b"), 1);
  EXPECT_EQ(spec->SiteIndex("nope"), -1);
  ASSERT_EQ(spec->links.size(), 1u);
  EXPECT_EQ(spec->links[0].forward, "int8:128:sr+zstd:3");
  EXPECT_EQ(spec->links[0].backward, "topk:0.01:ef");
  EXPECT_FALSE(spec->links[0].encryption);
  EXPECT_EQ(spec->links[0].rotate_bytes, 1ull << 30);
}

TEST(JobSpecTest, ParsesAGptOnText) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"(
name: lm
model: {family: gpt, context: 64, dim: 48, depth: 3, heads: 6, dropout: 0.1}
data: {path: corpus/kjv.txt, validation: 0.02}
training: {steps: 3}
sites: [{id: a, layers: [0, 2]}, {id: b, layers: [2, 5]}]
)",
                                              "lm.yaml", "/fed");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const GptSpec& g = spec->model.gpt;
  EXPECT_EQ(spec->model.family, ModelFamily::kGpt);
  EXPECT_EQ(g.vocab, 256);
  EXPECT_EQ(g.context, 64);
  EXPECT_EQ(g.mlp_dim, 4 * 48);
  EXPECT_FLOAT_EQ(g.dropout, 0.1f);
  EXPECT_EQ(spec->model.NumLayers(), 5);
  EXPECT_EQ(spec->data.kind, DatasetKind::kText);  // The default for family gpt.
  EXPECT_EQ(spec->data.path, "/fed/corpus/kjv.txt");
  EXPECT_EQ(spec->data.tokenizer, "bytes");
  EXPECT_DOUBLE_EQ(spec->data.validation, 0.02);
}

TEST(JobSpecTest, ParsesALlamaAndItsInitFrom) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"(
name: lm
model: {family: llama, context: 64, dim: 48, depth: 3, heads: 6, kv_heads: 2, mlp_dim: 128,
        rope_theta: 500000, norm_eps: 1e-6, tie_embeddings: true, init_from: released/tiny}
data: {path: corpus/kjv.txt}
training: {steps: 3}
sites: [{id: a, layers: [0, 2]}, {id: b, layers: [2, 5]}]
)",
                                              "lm.yaml", "/fed");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const GptSpec& g = spec->model.gpt;
  EXPECT_EQ(spec->model.family, ModelFamily::kLlama);
  EXPECT_TRUE(spec->model.IsLanguageModel());
  EXPECT_EQ(g.kv_heads, 2);
  EXPECT_EQ(g.mlp_dim, 128);
  EXPECT_DOUBLE_EQ(g.rope_theta, 500000.0);
  EXPECT_FLOAT_EQ(g.norm_eps, 1e-6f);
  EXPECT_EQ(spec->model.init_from, "/fed/released/tiny");
  EXPECT_EQ(spec->data.kind, DatasetKind::kText);

  auto error = [](const std::string& model) {
    absl::StatusOr<JobSpec> s = ParseJobSpec(
        "name: lm\nmodel: " + model +
            "\ndata: {path: k.txt}\ntraining: {steps: 1}\nsites: [{id: a, layers: [0, 5]}]\n",
        "lm.yaml", "/fed");
    return s.ok() ? std::string("ok") : std::string(s.status().message());
  };
  EXPECT_THAT(error("{family: llama, context: 8, dim: 48, depth: 3, heads: 6, kv_heads: 4, "
                    "mlp_dim: 8}"),
              ::testing::HasSubstr("heads 6 must be divisible by kv_heads 4"));
  EXPECT_THAT(error("{family: llama, context: 8, dim: 48, depth: 3, heads: 6}"),
              ::testing::HasSubstr("mlp_dim"));
  EXPECT_THAT(error("{family: gpt, context: 8, dim: 48, depth: 3, heads: 6, kv_heads: 2}"),
              ::testing::HasSubstr("not a key of family gpt"));
  EXPECT_THAT(error("{family: llama, context: 8, dim: 30, depth: 3, heads: 6, mlp_dim: 8}"),
              ::testing::HasSubstr("dim / heads must be even"));
}

// `format: tokens`: token shards (`strait data prepare`) in a directory resolved like a file; the
// format is agreed (the splits differ), and it applies to `dataset: text` only.
TEST(JobSpecTest, TokenShardsAreAFormatOfText) {
  const std::string base =
      "name: lm\nmodel: {family: gpt, context: 8, dim: 8, depth: 1, heads: 1}\n"
      "training: {steps: 3}\nsites: [{id: a, layers: [0, 3]}]\n";
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec(base + "data: {format: tokens, path: shards/kjv}\n", "lm.yaml", "/fed");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.kind, DatasetKind::kText);
  EXPECT_EQ(spec->data.format, DataFormat::kTokens);
  EXPECT_EQ(spec->data.path, "/fed/shards/kjv");
  EXPECT_EQ(spec->data.tokenizer, "bytes");
  EXPECT_NE(AgreedJobText(*spec).find("data.format: tokens"), std::string::npos);
  spec = ParseJobSpec(base + "data: {path: kjv.txt}\n", "lm.yaml", "/fed");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.format, DataFormat::kText);  // The default.
  EXPECT_NE(AgreedJobText(*spec).find("data.format: text"), std::string::npos);

  spec = ParseJobSpec(base + "data: {format: shards, path: x}\n", "lm.yaml", "/fed");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), ::testing::HasSubstr("format"));
  spec = ParseJobSpec(
      "name: m\nmodel: {family: mlp, input: 16, hidden: [4], classes: 3}\n"
      "data: {dataset: synthetic, format: tokens}\ntraining: {steps: 3}\n"
      "sites: [{id: a, layers: [0, 2]}]\n",
      "m.yaml", "/fed");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              ::testing::HasSubstr("only for 'dataset: text'"));
}

TEST(JobSpecTest, ATeacherAndItsLossAreParsedAndAgreed) {
  const std::string base = R"(
name: lm
model: {family: gpt, context: 64, dim: 48, depth: 3, heads: 6}
data: {path: corpus/kjv.txt}
sites: [{id: a, layers: [0, 2]}, {id: b, layers: [2, 5]}]
teacher:
  model: {family: gpt, context: 64, dim: 96, depth: 6, heads: 6}
  checkpoint: out/teacher/final.ckpt
)";
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec(base + "  sites: [{id: t-a}]\ntraining: {steps: 3}\n", "lm.yaml", "/fed");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->has_teacher);
  const TeacherSpec& t = spec->teacher;
  EXPECT_EQ(t.model.gpt.dim, 96);
  EXPECT_EQ(t.checkpoint, "/fed/out/teacher/final.ckpt");
  ASSERT_EQ(t.sites.size(), 1u);
  EXPECT_EQ(t.sites[0].layers, (LayerRange{0, 8}));  // One site holds all the teacher's layers.
  EXPECT_EQ(t.top_k, 16);
  EXPECT_EQ(t.values, TeacherValues::kFp16);
  EXPECT_DOUBLE_EQ(spec->training.distill.alpha, 0.5);
  EXPECT_DOUBLE_EQ(spec->training.distill.temperature, 2.0);

  absl::StatusOr<JobSpec> split = ParseJobSpec(
      base +
          "  top_k: 8\n  values: int8\n"
          "  sites: [{id: t-a, layers: [0, 3]}, {id: t-b, layers: [3, 8], device: cuda}]\n"
          "training: {steps: 3, distill: {alpha: 0.25, temperature: 4}}\n",
      "lm.yaml", "/fed");
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->teacher.sites[1].layers, (LayerRange{3, 8}));
  EXPECT_EQ(split->teacher.sites[1].device, DeviceKind::kCuda);
  EXPECT_EQ(split->teacher.values, TeacherValues::kInt8);
  EXPECT_DOUBLE_EQ(split->training.distill.temperature, 4.0);
  // Every process must agree on the teacher and the loss; not on where its checkpoint lies.
  const std::string agreed = AgreedJobText(*split);
  EXPECT_NE(agreed.find("teacher.sites.t-b: layers [3, 8)"), std::string::npos) << agreed;
  EXPECT_NE(agreed.find("teacher.sends: top 8 as int8"), std::string::npos) << agreed;
  EXPECT_NE(agreed.find("training.distill: alpha 0.25, temperature 4"), std::string::npos);
  EXPECT_EQ(agreed.find("final.ckpt"), std::string::npos) << agreed;
  EXPECT_NE(AgreedJobText(*spec).find("teacher.sends: top 16 as fp16"), std::string::npos);
}

TEST(JobSpecTest, ATokenizerModelResolvesAgainstTheFileLikeTheData) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"(
name: lm
model: {family: gpt, vocab: 4096, context: 64, dim: 48, depth: 3, heads: 6}
data: {path: corpus/kjv.txt, tokenizer: ../models/kjv-4096.model}
training: {steps: 3}
sites: [{id: a, layers: [0, 2]}, {id: b, layers: [2, 5]}]
)",
                                              "lm.yaml", "/fed/jobs");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.tokenizer, "/fed/models/kjv-4096.model");
  EXPECT_EQ(spec->model.gpt.vocab, 4096);  // Checked against the file where it is read.
  // Absolute stays; bytes stays bytes (and needs 256).
  spec = ParseJobSpec(R"(
name: lm
model: {family: gpt, vocab: 300, context: 8, dim: 8, depth: 1, heads: 1}
data: {path: /data/t.txt, tokenizer: /models/t.model}
training: {steps: 3}
sites: [{id: a, layers: [0, 3]}]
)",
                      "lm.yaml", "/fed");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data.tokenizer, "/models/t.model");
  spec = ParseJobSpec(R"(
name: lm
model: {family: gpt, vocab: 300, context: 8, dim: 8, depth: 1, heads: 1}
data: {path: /data/t.txt, tokenizer: bytes}
training: {steps: 3}
sites: [{id: a, layers: [0, 3]}]
)",
                      "lm.yaml", "/fed");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              ::testing::HasSubstr("byte tokens need model.vocab 256, found 300"));
}

TEST(JobSpecTest, DefaultsFillEverythingOptional) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"(
name: tiny
model: {family: vit, patch: 4, dim: 16, depth: 1, heads: 2}
training: {steps: 3}
sites: [{id: only, layers: [0, 3]}]
)",
                                              "tiny.yaml", "/x");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->gateway.address, "127.0.0.1:7443");
  EXPECT_EQ(spec->gateway.listen, "127.0.0.1:7443");
  EXPECT_EQ(spec->dashboard.address, "127.0.0.1:8080");
  EXPECT_EQ(spec->tls.ca, "/x/certs/ca.pem");
  EXPECT_EQ(spec->model.vit.mlp_dim, 64);  // 4 x dim
  EXPECT_EQ(spec->model.vit.height, 28);
  EXPECT_EQ(spec->data.path, "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(spec->training.global_batch, 128);
  EXPECT_EQ(spec->training.microbatches, 4);
  EXPECT_EQ(spec->training.optimizer.kind, OptimizerKind::kAdamW);
  EXPECT_TRUE(spec->links.empty());  // one site: no boundary
}

TEST(JobSpecTest, LookaheadDefaultsToTwoAndAppliesTo2bw) {
  const std::string base =
      "name: la\nmodel: {family: mlp, input: 784, hidden: [4], classes: 10}\n"
      "sites: [{id: only, layers: [0, 2]}]\n";
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec(base + "training: {steps: 3, schedule: 2bw}\n", "la.yaml", "/x");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_DOUBLE_EQ(spec->training.lookahead, 2.0);
  spec =
      ParseJobSpec(base + "training: {steps: 3, schedule: 2bw, lookahead: 0.5}\n", "la.yaml", "/x");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_DOUBLE_EQ(spec->training.lookahead, 0.5);
  // 0 is accepted with any schedule (lookahead: none); tests/data/bad_specs has the error.
  EXPECT_TRUE(ParseJobSpec(base + "training: {steps: 3, lookahead: 0}\n", "la.yaml", "/x").ok());
  EXPECT_EQ(spec->training.update, UpdateTiming::kDeferred);
  // Eager updates compute with the newest weights: no lookahead unless asked (bad_specs: asked).
  spec =
      ParseJobSpec(base + "training: {steps: 3, schedule: 2bw, update: eager}\n", "la.yaml", "/x");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training.update, UpdateTiming::kEager);
  EXPECT_DOUBLE_EQ(spec->training.lookahead, 0.0);
  EXPECT_TRUE(
      ParseJobSpec(base + "training: {steps: 3, schedule: 2bw, update: eager, lookahead: 0}\n",
                   "la.yaml", "/x")
          .ok());
  // Eager keeps the stale gradients unless told, and clips (with the last step's norm).
  EXPECT_EQ(spec->training.stale_gradients, StaleGradients::kKeep);
  spec = ParseJobSpec(base +
                          "training: {steps: 3, schedule: 2bw, update: eager, grad_clip: 1, "
                          "stale_gradients: drop}\n",
                      "la.yaml", "/x");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training.stale_gradients, StaleGradients::kDrop);
  EXPECT_DOUBLE_EQ(spec->training.grad_clip, 1.0);
}

TEST(JobSpecTest, EvalEveryDefaultsToTheEndOnlyAndAppliesToFlushingSchedules) {
  const std::string base =
      "name: ev\nmodel: {family: mlp, input: 784, hidden: [4], classes: 10}\n"
      "sites: [{id: only, layers: [0, 2]}]\n";
  absl::StatusOr<JobSpec> spec = ParseJobSpec(base + "training: {steps: 10}\n", "ev.yaml", "/x");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->training.eval_every, 0);
  EXPECT_FALSE(spec->training.EvaluatesAfter(5, 10));
  for (const std::string schedule : {"1f1b", "gpipe"}) {
    spec = ParseJobSpec(base + "training: {steps: 10, eval_every: 4, schedule: " + schedule + "}\n",
                        "ev.yaml", "/x");
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->training.eval_every, 4);
  }
  // After steps 4 and 8; not before the first step nor after the last (the final evaluation).
  std::vector<int64_t> after;
  for (int64_t s = 0; s <= 10; ++s) {
    if (spec->training.EvaluatesAfter(s, 10)) after.push_back(s);
  }
  EXPECT_EQ(after, (std::vector<int64_t>{4, 8}));
  EXPECT_FALSE(spec->training.EvaluatesAfter(8, 8));
  // 0 is accepted with 2bw; tests/data/bad_specs has the error for N > 0 and for N < 0.
  EXPECT_TRUE(
      ParseJobSpec(base + "training: {steps: 3, schedule: 2bw, eval_every: 0}\n", "ev.yaml", "/x")
          .ok());
}

TEST(JobSpecTest, LinksDefaultToLosslessAndEncrypted) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"(
name: three
model: {family: mlp, hidden: [8, 8]}
data: {dataset: synthetic}
training: {steps: 1, global_batch: 8, microbatches: 2}
sites:
  - {id: a, layers: [0, 1]}
  - {id: b, layers: [1, 2]}
  - {id: c, layers: [2, 3]}
links:
  - {between: [b, c], forward: bf16}
)",
                                              "three.yaml", "/");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->links.size(), 2u);
  EXPECT_EQ(spec->links[0].boundary, 0);
  EXPECT_EQ(spec->links[0].forward, "none");
  EXPECT_TRUE(spec->links[0].encryption);
  EXPECT_EQ(spec->links[1].boundary, 1);
  EXPECT_EQ(spec->links[1].forward, "bf16");
  EXPECT_EQ(spec->links[1].backward, "none");
}

// klt at a boundary: rows of at most 4096 values, klt alone in its chain.
TEST(JobSpecTest, KltLinksFitTheBoundary) {
  auto parse = [](int width, const std::string& link) {
    return ParseJobSpec(absl::StrCat("name: k\nmodel: {family: mlp, input: 784, hidden: [", width,
                                     ", 8], classes: 10}\n"
                                     "training: {steps: 1, global_batch: 8, microbatches: 2}\n"
                                     "sites:\n  - {id: a, layers: [0, 1]}\n"
                                     "  - {id: b, layers: [1, 3]}\n"
                                     "links:\n  - {between: [a, b], ",
                                     link, "}\n"),
                        "k.yaml", "/");
  };
  absl::StatusOr<JobSpec> spec = parse(4096, "forward: klt:0.1, backward: klt:1:sr");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(RefuseProjectingLinks(*spec, "strait train").ok());  // every direction travels
  EXPECT_THAT(std::string(parse(4097, "backward: klt:1:sr").status().message()),
              ::testing::HasSubstr("links[0].backward: klt:1:sr on boundary 0 of width 4097: klt "
                                   "codes rows of at most 4096 values"));
  EXPECT_THAT(std::string(parse(64, "forward: klt:0.1+zstd").status().message()),
              ::testing::HasSubstr("'klt' must be the only stage of a codec chain"));
  EXPECT_TRUE(parse(64, "forward: klt:0.1:fisher, backward: klt:1:sr").ok());
  EXPECT_THAT(
      std::string(parse(64, "forward: klt:0.1, backward: klt:1:sr:fisher").status().message()),
      ::testing::HasSubstr("links[0].backward: klt:1:sr:fisher: 'fisher' is the forward's "
                           "option"));
}

// proj at a boundary: the same K and seed both ways, K below the boundary's width (64 here);
// tests/data/bad_specs has the refusals' exact messages.
TEST(JobSpecTest, ProjectLinksAgreeAndFitTheBoundary) {
  auto parse = [](const std::string& layers, const std::string& link) {
    return ParseJobSpec(absl::StrCat(R"(
name: p
model: {family: mlp, input: 784, hidden: [64, 64], classes: 10}
training: {steps: 1, global_batch: 8, microbatches: 2}
sites:
  - {id: a, layers: )",
                                     layers, R"(}
  - {id: b, layers: auto}
links:
  - {between: [a, b], )",
                                     link, "}\n"),
                        "p.yaml", "/");
  };
  absl::StatusOr<JobSpec> spec =
      parse("[0, 2]", "forward: proj:32+int4:32+zstd, backward: proj:32");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->links[0].forward, "proj:32+int4:32+zstd");
  EXPECT_THAT(
      std::string(
          parse("[0, 2]", "forward: proj:63:9+int8:62, backward: proj:63:9").status().message()),
      ::testing::HasSubstr("proj:63 followed by int8:62: int8 and int4 after proj need an even K"));
  EXPECT_FALSE(parse("[0, 2]", "forward: proj:63:9+bf16, backward: proj:63:9+int4:62").ok());
  EXPECT_TRUE(parse("[0, 2]", "forward: proj:63:9+bf16, backward: proj:63:9+fp16").ok());
  EXPECT_THAT(
      std::string(parse("[0, 2]", "forward: proj:32:1, backward: proj:32:2").status().message()),
      ::testing::HasSubstr("links[0].backward: forward proj:32:1 and backward proj:32:2 "
                           "differ: the gradient must travel in the forward's subspace"));
  EXPECT_THAT(std::string(parse("[0, 2]", "forward: none, backward: proj:32").status().message()),
              ::testing::HasSubstr("forward none and backward proj:32 differ"));
  EXPECT_THAT(
      std::string(parse("[0, 1]", "forward: proj:64, backward: proj:64").status().message()),
      ::testing::HasSubstr("links[0].forward: proj:64 on boundary 0 of width 64: K must "
                           "be below the width"));
  // With layers: auto the boundary is the planner's: only the codec can check the width.
  EXPECT_TRUE(parse("auto", "forward: proj:64, backward: proj:64").ok());
  // One process does not build the projection: strait train, generate and export refuse.
  const absl::Status refused = RefuseProjectingLinks(*spec, "strait train");
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.message()),
              ::testing::HasSubstr("strait train cannot run this job: links[0] projects"));
  EXPECT_TRUE(RefuseProjectingLinks(*parse("[0, 2]", "forward: int8, backward: bf16"), "x").ok());
}

TEST(JobSpecTest, LoadReportsMissingFile) {
  absl::StatusOr<JobSpec> spec = LoadJobSpec("/nonexistent/fed.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(spec.status().message().find("/nonexistent/fed.yaml"), absl::string_view::npos);
}

TEST(JobSpecTest, NonMappingDocumentIsAnError) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec("- just\n- a list\n", "list.yaml", "/");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message().substr(0, 14), "list.yaml:1:1:");
}

}  // namespace
}  // namespace strait

namespace strait {
namespace {

constexpr char kReplicas[] = R"(
name: reps
model: {family: mlp, input: 784, hidden: [16, 16], classes: 10}
training:
  steps: 40
  global_batch: 32
  microbatches: 4
  sync: outer
  outer: {every: 10, lr: 0.5, momentum: 0.8, bits: 16}
  checkpoint: {every: 20}
sites:
  - {id: a, layers: [0, 1]}
  - {id: b, layers: [1, 3]}
replicas:
  - [a, b]
  - [c, d]
  - [e, f]
)";

TEST(JobSpecTest, ReplicasAreSlotsOfEveryPipeline) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(kReplicas, "reps.yaml", "/x");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->Replicas(), 3);
  EXPECT_EQ(spec->Stages(), 2);
  EXPECT_EQ(spec->SiteSlots(), 6);
  EXPECT_EQ(spec->SiteIdAt(3), "d");
  EXPECT_EQ(spec->SiteSlot("e"), 4);
  EXPECT_EQ(spec->SiteSlot("x"), -1);
  EXPECT_EQ(spec->training.sync, ReplicaSync::kOuter);
  EXPECT_EQ(spec->training.outer.every, 10);
  EXPECT_EQ(spec->training.outer.bits, 16);
  // Replica 2's sites run replica 0's stages under their own ids, and agree on the job.
  const JobView view = JobView::Initial(*spec, 2);
  EXPECT_EQ(view.replica, 2);
  EXPECT_EQ(view.SiteId(*spec, 1), "f");
  EXPECT_EQ(view.Layers(1), (LayerRange{1, 3}));
  EXPECT_EQ(spec->SiteSlot("f") % spec->Stages(), 1);
  EXPECT_EQ(JoinRequestFor(*spec, view, 1, UnsignedKey("f", 1)).agreed_job(), AgreedJobText(*spec));
  // Outer rounds have no one-pipeline equivalent; every_step's has R times the batch.
  EXPECT_EQ(OnePipelineOf(*spec).status().code(), absl::StatusCode::kFailedPrecondition);
  JobSpec every = *spec;
  every.training.sync = ReplicaSync::kEveryStep;
  absl::StatusOr<JobSpec> one = OnePipelineOf(every);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->Replicas(), 1);
  EXPECT_EQ(one->training.global_batch, 96);
  EXPECT_EQ(one->training.microbatches, 12);
  EXPECT_EQ(one->sites[0].id, "a");
}

}  // namespace
}  // namespace strait
