// The training section of a job spec (core/job_spec_parser.h): steps, batch, schedule, optimizer,
// checkpoints, evaluation, and the replicas with their sync and outer rounds.
#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "compression/chain_spec.h"
#include "core/frame_header.h"
#include "core/job_spec.h"
#include "core/job_spec_parser.h"
#include "core/status.h"
#include "core/tensor_split.h"
#include "core/yaml_reader.h"

namespace strait::job_spec_internal {

absl::Status JobSpecParser::ParseOptimizer(YamlMap& training) {
  YamlMap map = Section(training, "optimizer");
  STRAIT_RETURN_IF_ERROR(map.status());
  OptimizerSpec& o = spec_.training.optimizer;
  STRAIT_RETURN_IF_ERROR(
      map.Enum("name", {{"sgd", OptimizerKind::kSgd}, {"adamw", OptimizerKind::kAdamW}}, &o.kind));
  if (o.kind == OptimizerKind::kSgd) o.lr = 0.01;
  STRAIT_RETURN_IF_ERROR(map.Double("lr", 1e-12, 100.0, &o.lr));
  STRAIT_RETURN_IF_ERROR(map.Double("weight_decay", 0.0, 10.0, &o.weight_decay));
  STRAIT_RETURN_IF_ERROR(map.Int("warmup_steps", int64_t{0}, int64_t{1} << 40, &o.warmup_steps));
  STRAIT_RETURN_IF_ERROR(
      map.Enum("decay", {{"none", LrDecay::kNone}, {"cosine", LrDecay::kCosine}}, &o.decay));
  STRAIT_RETURN_IF_ERROR(map.Int("decay_steps", int64_t{0}, int64_t{1} << 40, &o.decay_steps));
  const bool sgd = o.kind == OptimizerKind::kSgd;
  for (absl::string_view key : sgd ? std::vector<absl::string_view>{"betas", "eps"}
                                   : std::vector<absl::string_view>{"momentum"}) {
    if (map.Has(key))
      return map.ErrorAt(key, absl::StrCat("not an option of ", ToString(o.kind),
                                           " (it belongs to ", sgd ? "adamw" : "sgd", ")"));
    map.Allow(key);
  }
  if (sgd) {
    STRAIT_RETURN_IF_ERROR(map.Double("momentum", 0.0, 0.999999, &o.momentum));
  } else {
    YAML::Node betas = map.Get("betas");
    if (betas.IsDefined() && !betas.IsNull()) {
      double b1 = 0, b2 = 0;
      if (!betas.IsSequence() || betas.size() != 2 ||
          !YAML::convert<double>::decode(betas[0], b1) ||
          !YAML::convert<double>::decode(betas[1], b2) || b1 < 0 || b1 >= 1 || b2 < 0 || b2 >= 1) {
        return map.ErrorAt("betas", "expected two numbers in [0, 1) such as [0.9, 0.999], found " +
                                        DescribeYamlNode(betas));
      }
      o.beta1 = b1, o.beta2 = b2;
    }
    STRAIT_RETURN_IF_ERROR(map.Double("eps", 1e-30, 1.0, &o.eps));
  }
  return Finish(map);
}

absl::Status JobSpecParser::ParseCheckpoint(YamlMap& training) {
  YamlMap map = Section(training, "checkpoint");
  STRAIT_RETURN_IF_ERROR(map.status());
  CheckpointSpec& c = spec_.training.checkpoint;
  STRAIT_RETURN_IF_ERROR(map.Int("every", 0, 1 << 30, &c.every));
  STRAIT_RETURN_IF_ERROR(map.String("dir", &c.dir));
  STRAIT_RETURN_IF_ERROR(map.Int("keep", 1, 1000, &c.keep));
  c.dir = Resolve(c.dir);
  return Finish(map);
}

absl::Status JobSpecParser::ParseTraining(YamlMap& root) {
  YamlMap map = Section(root, "training");
  STRAIT_RETURN_IF_ERROR(map.status());
  if (!map.node().IsDefined()) {
    return root.Missing("training",
                        "a mapping with steps or epochs, global_batch and microbatches");
  }
  TrainingSpec& t = spec_.training;
  STRAIT_RETURN_IF_ERROR(map.Int("steps", int64_t{1}, int64_t{1} << 40, &t.steps));
  STRAIT_RETURN_IF_ERROR(map.Int("epochs", 1, 1 << 20, &t.epochs));
  if (map.Has("steps") && map.Has("epochs")) {
    return map.ErrorAt("epochs", "give either steps or epochs, not both");
  }
  if (!map.Has("steps") && !map.Has("epochs")) {
    return map.Missing("steps", "how long to train: steps: N or epochs: N");
  }
  STRAIT_RETURN_IF_ERROR(map.Int("global_batch", 1, 1 << 24, &t.global_batch));
  STRAIT_RETURN_IF_ERROR(map.Int("microbatches", 1, 1 << 16, &t.microbatches));
  if (t.global_batch % t.microbatches != 0) {
    return map.ErrorAt(
        "microbatches",
        absl::StrCat("global_batch ", t.global_batch, " is not divisible by microbatches ",
                     t.microbatches, "; choose a divisor such as ",
                     LargestDivisorAtMost(t.global_batch, t.microbatches)));
  }
  STRAIT_RETURN_IF_ERROR(map.Enum(
      "schedule", {{"1f1b", Schedule::k1F1B}, {"gpipe", Schedule::kGPipe}, {"2bw", Schedule::k2BW}},
      &t.schedule));
  if (map.Has("extra_in_flight") && map.Get("extra_in_flight").IsScalar() &&
      map.Get("extra_in_flight").Scalar() == "auto") {
    YAML::Node extra = map.Get("extra_in_flight");
    t.plan_extra_in_flight = true;  // The split planner chooses it (plan/split_planner.h).
    extra_in_flight_node_ = extra;
  } else {
    STRAIT_RETURN_IF_ERROR(map.Int("extra_in_flight", 0, 1 << 16, &t.extra_in_flight));
  }
  STRAIT_RETURN_IF_ERROR(map.Double("lookahead", 0.0, 16.0, &t.lookahead));
  if (map.Has("lookahead") && t.schedule != Schedule::k2BW && t.lookahead != 0.0) {
    return map.ErrorAt("lookahead",
                       absl::StrCat("applies to schedule 2bw only (this job's schedule is ",
                                    ToString(t.schedule), "); remove it or set it to 0"));
  }
  STRAIT_RETURN_IF_ERROR(map.Enum(
      "precision", {{"fp32", Precision::kFp32}, {"bf16", Precision::kBf16}}, &t.precision));
  STRAIT_RETURN_IF_ERROR(ParseOptimizer(map));
  STRAIT_RETURN_IF_ERROR(map.Double("grad_clip", 0.0, 1e12, &t.grad_clip));
  STRAIT_RETURN_IF_ERROR(ParseUpdateTiming(map));
  STRAIT_RETURN_IF_ERROR(ParseEvalEvery(map));
  STRAIT_RETURN_IF_ERROR(ParseCheckpoint(map));
  STRAIT_RETURN_IF_ERROR(ParseSync(map));
  STRAIT_RETURN_IF_ERROR(ParseDistill(map));
  return Finish(map);
}

// training.sync, training.outer and training.fixed_point_bits; ParseReplicas checks that the job
// has replicas for them.
absl::Status JobSpecParser::ParseSync(YamlMap& map) {
  TrainingSpec& t = spec_.training;
  STRAIT_RETURN_IF_ERROR(map.Enum(
      "sync", {{"every_step", ReplicaSync::kEveryStep}, {"outer", ReplicaSync::kOuter}}, &t.sync));
  STRAIT_RETURN_IF_ERROR(map.Int("fixed_point_bits", 8, 30, &t.fixed_point_bits));
  for (const char* key : {"sync", "outer", "fixed_point_bits"}) {
    if (map.Has(key)) sync_nodes_.emplace_back(key, map.Get(key));
  }
  YamlMap outer = Section(map, "outer");
  STRAIT_RETURN_IF_ERROR(outer.status());
  if (outer.node().IsDefined() && t.sync != ReplicaSync::kOuter) {
    return map.ErrorAt("outer", "applies to sync: outer only; remove it or set sync: outer");
  }
  STRAIT_RETURN_IF_ERROR(outer.Int("every", 1, 1 << 20, &t.outer.every));
  STRAIT_RETURN_IF_ERROR(outer.Double("lr", 1e-6, 100.0, &t.outer.lr));
  STRAIT_RETURN_IF_ERROR(outer.Double("momentum", 0.0, 0.999, &t.outer.momentum));
  STRAIT_RETURN_IF_ERROR(outer.Int("bits", 4, 32, &t.outer.bits));
  if (t.outer.bits != 4 && t.outer.bits != 8 && t.outer.bits != 16 && t.outer.bits != 32) {
    return outer.ErrorAt("bits", absl::StrCat("expected 4, 8, 16 or 32 (bits of each value in the "
                                              "replicas' sum), found ",
                                              t.outer.bits));
  }
  STRAIT_RETURN_IF_ERROR(outer.Int("fragments", 1, 1 << 20, &t.outer.fragments));
  if (t.outer.fragments > t.outer.every) {
    return outer.ErrorAt(
        "fragments",
        absl::StrCat("fragments (", t.outer.fragments, ") exceeds every (", t.outer.every,
                     "): at most one fragment's round may start a step"));
  }
  STRAIT_RETURN_IF_ERROR(outer.Int("delay", 0, 1 << 20, &t.outer.delay));
  if (t.outer.delay >= t.outer.every) {
    return outer.ErrorAt(
        "delay", absl::StrCat("delay (", t.outer.delay, ") must be below every (", t.outer.every,
                              "): a fragment's round must land before its next"));
  }
  return Finish(outer);
}

// `replicas:` R pipelines of site ids, the first the ids of `sites` in stage order.
absl::Status JobSpecParser::ParseReplicas(YamlMap& root) {
  YAML::Node node = root.Get("replicas");
  if (!node.IsDefined() || node.IsNull()) {
    if (sync_nodes_.empty()) return absl::OkStatus();
    return YamlError(file_, sync_nodes_.front().second,
                     absl::StrCat("training.", sync_nodes_.front().first),
                     "applies to a job with replicas only (replicas: a list of pipelines); "
                     "remove it");
  }
  const std::string expected =
      absl::StrCat("a list of at least two pipelines, each a list of ", spec_.sites.size(),
                   " site ids in stage order, the first the ids of sites: [", SiteList(), "]");
  if (!node.IsSequence() || node.size() < 2) {
    return root.ErrorAt("replicas",
                        absl::StrCat("expected ", expected, "; found ", DescribeYamlNode(node)));
  }
  if (spec_.PlansSplit()) {
    return root.ErrorAt("replicas",
                        "replicas need a split written in the job spec (every replica trains "
                        "the same one); give each site its layers instead of layers: auto");
  }
  if (spec_.model.IsLanguageModel() && spec_.model.gpt.tie_embeddings && spec_.sites.size() > 1) {
    // The last stage adds the first's share of the tied matrix's gradient at its update, after
    // the replicas' sums: it would add one replica's share to the mean of the others'.
    return root.ErrorAt("replicas",
                        "replicas do not take model.tie_embeddings across sites yet; untie the "
                        "embeddings or put the whole model on one site per pipeline");
  }
  if (node.size() * spec_.sites.size() > kMaxSites) {
    return root.ErrorAt("replicas", absl::StrCat("at most ", kMaxSites, " sites in all, found ",
                                                 node.size() * spec_.sites.size()));
  }
  std::set<std::string> seen;
  for (size_t r = 0; r < node.size(); ++r) {
    const std::string path = absl::StrCat("replicas[", r, "]");
    if (!node[r].IsSequence() || node[r].size() != spec_.sites.size()) {
      return YamlError(
          file_, node[r], path,
          absl::StrCat("expected ", spec_.sites.size(), " site ids (one per stage), found ",
                       DescribeYamlNode(node[r])));
    }
    std::vector<std::string> ids;
    for (size_t s = 0; s < node[r].size(); ++s) {
      const std::string id = node[r][s].IsScalar() ? node[r][s].Scalar() : "";
      const std::string at = absl::StrCat(path, "[", s, "]");
      if (!IsSiteId(id)) {
        return YamlError(file_, node[r][s], at,
                         "expected a site id (1-63 lower-case letters, digits, '.', '_' or "
                         "'-'), found " +
                             DescribeYamlNode(node[r][s]));
      }
      if (r == 0 && id != spec_.sites[s].id) {
        return YamlError(file_, node[r][s], at,
                         absl::StrCat("the first pipeline is the sites' own, in stage order: "
                                      "expected '",
                                      spec_.sites[s].id, "', found '", id, "'"));
      }
      if (!seen.insert(id).second) {
        return YamlError(file_, node[r][s], at,
                         absl::StrCat("site '", id,
                                      "' appears twice; every replica of every "
                                      "stage is a site of its own"));
      }
      ids.push_back(id);
    }
    spec_.replicas.push_back(std::move(ids));
  }
  return CheckOuterRounds(root);
}

// 4-bit values leave room for the sum of at most 7 replicas. (Any schedule: a round's landing
// adds to the newest weights, which 2bw's next update builds on.)
absl::Status JobSpecParser::CheckOuterRounds(YamlMap& root) {
  const TrainingSpec& t = spec_.training;
  if (t.sync != ReplicaSync::kOuter) return absl::OkStatus();
  YamlMap training = Section(root, "training");
  if (t.outer.bits == 4 && spec_.Replicas() > 7) {
    return training.ErrorAt("outer", absl::StrCat("bits 4 holds the sum of at most 7 replicas; "
                                                  "this job has ",
                                                  spec_.Replicas(), ": use bits 8"));
  }
  return absl::OkStatus();
}

// Every site evaluates between the same steps, with the weights all stages hold then: 1f1b and
// gpipe flush the pipeline at every step's end, 2bw never does.
absl::Status JobSpecParser::ParseEvalEvery(YamlMap& map) {
  TrainingSpec& t = spec_.training;
  STRAIT_RETURN_IF_ERROR(map.Int("eval_every", int64_t{0}, int64_t{1} << 40, &t.eval_every));
  if (t.eval_every == 0 || t.schedule != Schedule::k2BW) return absl::OkStatus();
  return map.ErrorAt("eval_every",
                     "schedule 2bw never flushes the pipeline, so between steps the sites' "
                     "weights are never one consistent version to evaluate; remove eval_every "
                     "(the run is still evaluated after its last step) or use schedule 1f1b");
}

absl::Status JobSpecParser::ParseUpdateTiming(YamlMap& map) {
  TrainingSpec& t = spec_.training;
  STRAIT_RETURN_IF_ERROR(
      map.Enum("update", {{"deferred", UpdateTiming::kDeferred}, {"eager", UpdateTiming::kEager}},
               &t.update));
  STRAIT_RETURN_IF_ERROR(map.Enum(
      "stale_gradients", {{"keep", StaleGradients::kKeep}, {"drop", StaleGradients::kDrop}},
      &t.stale_gradients));
  if (t.update != UpdateTiming::kEager) {
    if (map.Has("stale_gradients")) {
      return map.ErrorAt("stale_gradients",
                         "applies to update: eager only (with update deferred every microbatch "
                         "computes with the weights of one update before); remove it or set "
                         "update: eager");
    }
    return absl::OkStatus();
  }
  if (t.schedule != Schedule::k2BW) {
    return map.ErrorAt("update", absl::StrCat("eager applies to schedule 2bw only (this job's "
                                              "schedule is ",
                                              ToString(t.schedule), "); remove it"));
  }
  if (map.Has("lookahead") && t.lookahead != 0.0) {
    return map.ErrorAt("lookahead",
                       "applies to update: deferred only (eager computes most microbatches with "
                       "the newest weights); remove it or set it to 0");
  }
  t.lookahead = 0.0;
  return absl::OkStatus();
}

}  // namespace strait::job_spec_internal
