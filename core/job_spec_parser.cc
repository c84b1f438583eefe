// ParseJobSpec: YAML text -> validated JobSpec. Section by section, each reading its keys with
// YamlMap (which rejects unknown keys), then the checks that span sections (layer split, batch,
// data vs model).
#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "compression/chain_spec.h"
#include "core/frame_header.h"
#include "core/job_spec.h"
#include "core/status.h"
#include "core/tensor_split.h"
#include "core/yaml_reader.h"

namespace strait {
namespace {

constexpr int kMaxWidth = 1 << 20;  // Largest layer width / class count accepted.
constexpr int kMaxSites = 64;
constexpr int kMaxWorkers = 1024;
constexpr int kMaxMachines = 4096;
constexpr int kMaxDepth = 1024;

// 1-63 lower-case letters, digits, '.', '_' or '-': a site id names its certificate and files.
bool IsSiteId(const std::string& id) {
  static const std::regex kId("^[a-z0-9][a-z0-9._-]{0,62}$");
  return std::regex_match(id, kId);
}

class JobSpecParser {
 public:
  JobSpecParser(absl::string_view file, absl::string_view base_dir)
      : file_(file), base_dir_(std::filesystem::absolute(std::string(base_dir))) {}

  absl::StatusOr<JobSpec> Parse(absl::string_view text) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(
          file_, ":", e.mark.line + 1, ":", e.mark.column + 1, ": YAML syntax error: ", e.msg));
    }
    if (!root.IsMap()) {
      return YamlError(file_, root, "",
                       "a job spec is a mapping with keys name, gateway, model, data, training, "
                       "sites, ...; found " +
                           DescribeYamlNode(root));
    }
    spec_.source_path = file_;
    YamlMap map(file_, root, "");
    STRAIT_RETURN_IF_ERROR(ParseName(map));
    STRAIT_RETURN_IF_ERROR(ParseGateway(map));
    STRAIT_RETURN_IF_ERROR(ParseDashboard(map));
    STRAIT_RETURN_IF_ERROR(ParseTls(map));
    STRAIT_RETURN_IF_ERROR(ParseModel(map));
    STRAIT_RETURN_IF_ERROR(ParseData(map));
    STRAIT_RETURN_IF_ERROR(ParseTraining(map));
    STRAIT_RETURN_IF_ERROR(ParseSites(map));
    STRAIT_RETURN_IF_ERROR(ParseLinks(map));
    STRAIT_RETURN_IF_ERROR(ParseReplicas(map));
    STRAIT_RETURN_IF_ERROR(CheckSchedule(map));
    STRAIT_RETURN_IF_ERROR(map.Finish());
    STRAIT_RETURN_IF_ERROR(CheckMemoryBudget(map));
    return std::move(spec_);
  }

 private:
  // Relative paths are relative to the job spec's directory, so every process agrees on them.
  std::string Resolve(const std::string& path) const {
    if (path.empty()) return path;
    std::filesystem::path p(path);
    return (p.is_absolute() ? p : base_dir_ / p).lexically_normal().string();
  }

  // The mapping under `key` (absent is fine: every section has defaults). Check status() after.
  YamlMap Section(YamlMap& parent, absl::string_view key) {
    return YamlMap(file_, parent.Get(key), parent.PathOf(key));
  }

  static absl::Status CheckHostPort(YamlMap& map, absl::string_view key, const std::string& value) {
    static const std::regex kHostPort(R"(^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$)");
    std::smatch m;
    if (!std::regex_match(value, m, kHostPort) || std::stoi(m[2]) > 65535) {
      return map.ErrorAt(
          key, "expected host:port such as 127.0.0.1:7443 or [::1]:7443, found '" + value + "'");
    }
    return absl::OkStatus();
  }

  absl::Status ParseName(YamlMap& map) {
    if (!map.Has("name"))
      return map.Missing("name", "the federation's name, e.g. name: fashion-3dc");
    STRAIT_RETURN_IF_ERROR(map.String("name", &spec_.name));
    static const std::regex kName("^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$");
    if (!std::regex_match(spec_.name, kName)) {
      return map.ErrorAt("name",
                         "expected 1-64 letters, digits, '.', '_' or '-' (starting with a "
                         "letter or digit), found '" +
                             spec_.name + "'");
    }
    return absl::OkStatus();
  }

  absl::Status ParseGateway(YamlMap& root) {
    YamlMap map = Section(root, "gateway");
    STRAIT_RETURN_IF_ERROR(map.status());
    GatewaySpec& g = spec_.gateway;
    STRAIT_RETURN_IF_ERROR(map.String("address", &g.address));
    STRAIT_RETURN_IF_ERROR(CheckHostPort(map, "address", g.address));
    g.listen = g.address;
    STRAIT_RETURN_IF_ERROR(map.String("listen", &g.listen));
    STRAIT_RETURN_IF_ERROR(CheckHostPort(map, "listen", g.listen));
    STRAIT_RETURN_IF_ERROR(map.Bytes("memory_budget", 1 << 20, &g.memory_budget));
    STRAIT_RETURN_IF_ERROR(map.Seconds("heartbeat_timeout", 0.1, &g.heartbeat_timeout_s));
    STRAIT_RETURN_IF_ERROR(map.Bytes("chunk_size", 1 << 10, &g.chunk_size));
    STRAIT_RETURN_IF_ERROR(map.Double("replan_share", 0.0, 100.0, &g.replan_share));
    if (g.chunk_size > kMaxChunkBytes) {
      return map.ErrorAt("chunk_size", absl::StrCat("expected at most 1MiB (the largest chunk the "
                                                    "protocol carries), found ",
                                                    g.chunk_size, " bytes"));
    }
    return map.Finish();
  }

  absl::Status ParseDashboard(YamlMap& root) {
    YamlMap map = Section(root, "dashboard");
    STRAIT_RETURN_IF_ERROR(map.status());
    STRAIT_RETURN_IF_ERROR(map.String("address", &spec_.dashboard.address));
    STRAIT_RETURN_IF_ERROR(CheckHostPort(map, "address", spec_.dashboard.address));
    STRAIT_RETURN_IF_ERROR(map.String("token_file", &spec_.dashboard.token_file));
    spec_.dashboard.token_file = Resolve(spec_.dashboard.token_file);
    return map.Finish();
  }

  absl::Status ParseTls(YamlMap& root) {
    YamlMap map = Section(root, "tls");
    STRAIT_RETURN_IF_ERROR(map.status());
    TlsSpec& t = spec_.tls;
    for (auto [key, field] : {std::pair{"ca", &t.ca},
                              {"gateway_cert", &t.gateway_cert},
                              {"gateway_key", &t.gateway_key},
                              {"site_cert", &t.site_cert},
                              {"site_key", &t.site_key},
                              {"deny_list", &t.deny_list}}) {
      STRAIT_RETURN_IF_ERROR(map.String(key, field));
      *field = Resolve(*field);
    }
    return map.Finish();
  }

  absl::Status ParseModel(YamlMap& root) {
    YamlMap map = Section(root, "model");
    STRAIT_RETURN_IF_ERROR(map.status());
    if (!map.node().IsDefined())
      return root.Missing("model", "a mapping with 'family: mlp', 'family: vit' or 'family: gpt'");
    ModelSpec& m = spec_.model;
    STRAIT_RETURN_IF_ERROR(map.Enum(
        "family",
        {{"mlp", ModelFamily::kMlp}, {"vit", ModelFamily::kVit}, {"gpt", ModelFamily::kGpt}},
        &m.family, /*required=*/true));
    int64_t seed = static_cast<int64_t>(m.init_seed);
    STRAIT_RETURN_IF_ERROR(map.Int("init_seed", int64_t{0}, INT64_MAX, &seed));
    m.init_seed = static_cast<uint64_t>(seed);

    // Each family's own keys; a key of another family is an error that says so.
    const std::map<ModelFamily, std::vector<absl::string_view>> family_keys = {
        {ModelFamily::kMlp, {"input", "hidden", "activation", "classes", "dropout"}},
        {ModelFamily::kVit,
         {"image", "patch", "dim", "depth", "heads", "mlp_dim", "classes", "dropout"}},
        {ModelFamily::kGpt,
         {"vocab", "context", "dim", "depth", "heads", "mlp_dim", "dropout", "tie_embeddings"}}};
    const std::vector<absl::string_view>& own = family_keys.at(m.family);
    for (const auto& [family, keys] : family_keys) {
      for (absl::string_view key : keys) {
        if (std::find(own.begin(), own.end(), key) != own.end()) continue;
        if (map.Has(key)) {
          return map.ErrorAt(key, absl::StrCat("not a key of family ", ToString(m.family),
                                               "; remove it or change 'family'"));
        }
        map.Allow(key);
      }
    }
    if (m.family == ModelFamily::kGpt) return ParseGpt(map);
    if (m.family == ModelFamily::kMlp) {
      MlpSpec& mlp = m.mlp;
      STRAIT_RETURN_IF_ERROR(map.Int("input", 1, kMaxWidth, &mlp.input));
      STRAIT_RETURN_IF_ERROR(
          map.IntList("hidden", 1, kMaxWidth, 0, &mlp.hidden, /*required=*/true));
      STRAIT_RETURN_IF_ERROR(map.Int("classes", 2, kMaxWidth, &mlp.classes));
      STRAIT_RETURN_IF_ERROR(map.Enum("activation",
                                      {{"relu", Activation::kRelu}, {"gelu", Activation::kGelu}},
                                      &mlp.activation));
      STRAIT_RETURN_IF_ERROR(map.Float("dropout", 0.0, 0.95, &mlp.dropout));
    } else {
      VitSpec& v = m.vit;
      std::vector<int> image = {v.channels, v.height, v.width};
      STRAIT_RETURN_IF_ERROR(map.IntList("image", 1, 4096, 3, &image));
      v.channels = image[0], v.height = image[1], v.width = image[2];
      STRAIT_RETURN_IF_ERROR(map.Int("patch", 1, 4096, &v.patch, /*required=*/true));
      if (v.height % v.patch != 0 || v.width % v.patch != 0) {
        return map.ErrorAt("patch",
                           absl::StrCat("patch size ", v.patch, " must divide the image height ",
                                        v.height, " and width ", v.width));
      }
      if (int64_t patches = int64_t{v.height / v.patch} * (v.width / v.patch); patches > 65536) {
        return map.ErrorAt("patch", absl::StrCat("patch size ", v.patch, " cuts the image into ",
                                                 patches, " patches; at most 65536 are supported"));
      }
      STRAIT_RETURN_IF_ERROR(map.Int("dim", 1, 65536, &v.dim, /*required=*/true));
      STRAIT_RETURN_IF_ERROR(map.Int("depth", 1, kMaxDepth, &v.depth, /*required=*/true));
      STRAIT_RETURN_IF_ERROR(map.Int("heads", 1, 1024, &v.heads, /*required=*/true));
      if (v.dim % v.heads != 0) {
        return map.ErrorAt("heads",
                           absl::StrCat("dim ", v.dim, " must be divisible by heads ", v.heads));
      }
      v.mlp_dim = 4 * v.dim;
      STRAIT_RETURN_IF_ERROR(map.Int("mlp_dim", 1, kMaxWidth, &v.mlp_dim));
      STRAIT_RETURN_IF_ERROR(map.Int("classes", 2, kMaxWidth, &v.classes));
      STRAIT_RETURN_IF_ERROR(map.Float("dropout", 0.0, 0.95, &v.dropout));
    }
    return map.Finish();
  }

  absl::Status ParseGpt(YamlMap& map) {
    GptSpec& g = spec_.model.gpt;
    STRAIT_RETURN_IF_ERROR(map.Int("vocab", 2, kMaxWidth, &g.vocab));
    STRAIT_RETURN_IF_ERROR(map.Int("context", 1, 65536, &g.context, /*required=*/true));
    STRAIT_RETURN_IF_ERROR(map.Int("dim", 1, 65536, &g.dim, /*required=*/true));
    STRAIT_RETURN_IF_ERROR(map.Int("depth", 1, kMaxDepth, &g.depth, /*required=*/true));
    STRAIT_RETURN_IF_ERROR(map.Int("heads", 1, 1024, &g.heads, /*required=*/true));
    if (g.dim % g.heads != 0) {
      return map.ErrorAt("heads",
                         absl::StrCat("dim ", g.dim, " must be divisible by heads ", g.heads));
    }
    g.mlp_dim = 4 * g.dim;
    STRAIT_RETURN_IF_ERROR(map.Int("mlp_dim", 1, kMaxWidth, &g.mlp_dim));
    STRAIT_RETURN_IF_ERROR(map.Float("dropout", 0.0, 0.95, &g.dropout));
    STRAIT_RETURN_IF_ERROR(map.Bool("tie_embeddings", &g.tie_embeddings));
    return map.Finish();
  }

  absl::Status ParseData(YamlMap& root) {
    YamlMap map = Section(root, "data");
    STRAIT_RETURN_IF_ERROR(map.status());
    DataSpec& d = spec_.data;
    const ModelSpec& m = spec_.model;
    const bool gpt = m.family == ModelFamily::kGpt;
    if (gpt) d.kind = DatasetKind::kText;
    STRAIT_RETURN_IF_ERROR(map.Enum("dataset",
                                    {{"fashion-mnist", DatasetKind::kFashionMnist},
                                     {"synthetic", DatasetKind::kSynthetic},
                                     {"text", DatasetKind::kText}},
                                    &d.kind));
    if (gpt != (d.kind == DatasetKind::kText)) {
      return map.ErrorAt("dataset", gpt ? "family gpt trains on 'dataset: text'"
                                        : "'dataset: text' is for 'family: gpt'");
    }
    const bool text = d.kind == DatasetKind::kText;
    STRAIT_RETURN_IF_ERROR(map.String("path", &d.path, /*required=*/text));
    d.path = Resolve(d.path);
    int64_t seed = static_cast<int64_t>(d.seed);
    STRAIT_RETURN_IF_ERROR(map.Int("seed", int64_t{0}, INT64_MAX, &seed));
    d.seed = static_cast<uint64_t>(seed);
    for (absl::string_view key : {"tokenizer", "validation"}) {
      if (!text && map.Has(key)) return map.ErrorAt(key, "only for 'dataset: text'");
      map.Allow(key);
    }
    if (text) {
      STRAIT_RETURN_IF_ERROR(map.String("tokenizer", &d.tokenizer));
      if (d.tokenizer.empty()) {
        return map.ErrorAt("tokenizer",
                           "expected 'bytes' or the path of a SentencePiece model (`strait "
                           "tokenizer train` writes one)");
      }
      // A model's vocabulary is checked where the file is read (site, strait train, generate).
      if (d.tokenizer != "bytes") d.tokenizer = Resolve(d.tokenizer);
      if (d.tokenizer == "bytes" && m.gpt.vocab != 256) {
        return map.ErrorAt("tokenizer",
                           absl::StrCat("byte tokens need model.vocab 256, found ", m.gpt.vocab));
      }
      STRAIT_RETURN_IF_ERROR(map.Double("validation", 0.001, 0.5, &d.validation));
    }
    if (d.kind != DatasetKind::kSynthetic) {
      for (absl::string_view key : {"train_size", "test_size"}) {
        if (map.Has(key)) return map.ErrorAt(key, "only for 'dataset: synthetic'");
        map.Allow(key);
      }
    }
    if (text) return map.Finish();
    if (d.kind == DatasetKind::kSynthetic) {
      STRAIT_RETURN_IF_ERROR(map.Int("train_size", 1, 1 << 24, &d.synthetic_train));
      STRAIT_RETURN_IF_ERROR(map.Int("test_size", 1, 1 << 24, &d.synthetic_test));
    } else {
      // Fashion-MNIST is 28x28 grey images in 10 classes: the model must fit it.
      if (m.InputFeatures() != 784 || m.Classes() != 10 ||
          (m.family == ModelFamily::kVit && m.vit.channels != 1)) {
        return map.ErrorAt(
            "dataset",
            absl::StrCat(
                "fashion-mnist has 28x28x1 inputs (784 features) and 10 classes; the model takes ",
                m.InputFeatures(), " features and ", m.Classes(), " classes"));
      }
    }
    return map.Finish();
  }

  absl::Status ParseOptimizer(YamlMap& training) {
    YamlMap map = Section(training, "optimizer");
    STRAIT_RETURN_IF_ERROR(map.status());
    OptimizerSpec& o = spec_.training.optimizer;
    STRAIT_RETURN_IF_ERROR(map.Enum(
        "name", {{"sgd", OptimizerKind::kSgd}, {"adamw", OptimizerKind::kAdamW}}, &o.kind));
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
            !YAML::convert<double>::decode(betas[1], b2) || b1 < 0 || b1 >= 1 || b2 < 0 ||
            b2 >= 1) {
          return map.ErrorAt("betas",
                             "expected two numbers in [0, 1) such as [0.9, 0.999], found " +
                                 DescribeYamlNode(betas));
        }
        o.beta1 = b1, o.beta2 = b2;
      }
      STRAIT_RETURN_IF_ERROR(map.Double("eps", 1e-30, 1.0, &o.eps));
    }
    return map.Finish();
  }

  absl::Status ParseCheckpoint(YamlMap& training) {
    YamlMap map = Section(training, "checkpoint");
    STRAIT_RETURN_IF_ERROR(map.status());
    CheckpointSpec& c = spec_.training.checkpoint;
    STRAIT_RETURN_IF_ERROR(map.Int("every", 0, 1 << 30, &c.every));
    STRAIT_RETURN_IF_ERROR(map.String("dir", &c.dir));
    STRAIT_RETURN_IF_ERROR(map.Int("keep", 1, 1000, &c.keep));
    c.dir = Resolve(c.dir);
    return map.Finish();
  }

  absl::Status ParseTraining(YamlMap& root) {
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
    STRAIT_RETURN_IF_ERROR(
        map.Enum("schedule",
                 {{"1f1b", Schedule::k1F1B}, {"gpipe", Schedule::kGPipe}, {"2bw", Schedule::k2BW}},
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
    return map.Finish();
  }

  // training.sync, training.outer and training.fixed_point_bits; ParseReplicas checks that the job
  // has replicas for them.
  absl::Status ParseSync(YamlMap& map) {
    TrainingSpec& t = spec_.training;
    STRAIT_RETURN_IF_ERROR(
        map.Enum("sync", {{"every_step", ReplicaSync::kEveryStep}, {"outer", ReplicaSync::kOuter}},
                 &t.sync));
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
    STRAIT_RETURN_IF_ERROR(outer.Int("bits", 8, 32, &t.outer.bits));
    if (t.outer.bits != 8 && t.outer.bits != 16 && t.outer.bits != 32) {
      return outer.ErrorAt("bits", absl::StrCat("expected 8, 16 or 32 (bits of each value in the "
                                                "replicas' sum), found ",
                                                t.outer.bits));
    }
    return outer.Finish();
  }

  // `replicas:` R pipelines of site ids, the first the ids of `sites` in stage order.
  absl::Status ParseReplicas(YamlMap& root) {
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
    if (spec_.model.family == ModelFamily::kGpt && spec_.model.gpt.tie_embeddings &&
        spec_.sites.size() > 1) {
      // The last stage adds the first's share of the tied matrix's gradient at its update, after
      // the replicas' sums: it would add one replica's share to the mean of the others'.
      return root.ErrorAt("replicas",
                          "replicas do not take model.tie_embeddings across sites yet; untie the "
                          "embeddings or put the whole model on one site per pipeline");
    }
    for (const SiteSpec& site : spec_.sites) {
      if (site.machines > 1) {
        return root.ErrorAt(
            "replicas", absl::StrCat("replicas take sites of one machine each for now; site '",
                                     site.id, "' has ", site.machines,
                                     ": give it machines: 1 (more workers) or drop the replicas"));
      }
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

  // An outer round replaces the parameters: every stage must hold one version of them between
  // steps (no 2bw), and a checkpoint must fall on a round's end (its start is then the
  // checkpoint's parameters; the outer momentum is saved with it).
  absl::Status CheckOuterRounds(YamlMap& root) {
    const TrainingSpec& t = spec_.training;
    if (t.sync != ReplicaSync::kOuter) return absl::OkStatus();
    YamlMap training = Section(root, "training");
    if (t.schedule == Schedule::k2BW) {
      return training.ErrorAt("sync",
                              "outer needs a schedule that flushes the pipeline every "
                              "step (1f1b or gpipe): an outer step replaces the weights "
                              "that 2bw keeps in flight");
    }
    if (t.checkpoint.every % t.outer.every != 0) {
      return training.ErrorAt("checkpoint",
                              absl::StrCat("checkpoint.every (", t.checkpoint.every,
                                           ") must be a multiple of outer.every (", t.outer.every,
                                           "): a checkpoint holds the state at the end of an outer "
                                           "round"));
    }
    return absl::OkStatus();
  }

  // Every site evaluates between the same steps, with the weights all stages hold then: 1f1b and
  // gpipe flush the pipeline at every step's end, 2bw never does.
  absl::Status ParseEvalEvery(YamlMap& map) {
    TrainingSpec& t = spec_.training;
    STRAIT_RETURN_IF_ERROR(map.Int("eval_every", int64_t{0}, int64_t{1} << 40, &t.eval_every));
    if (t.eval_every == 0 || t.schedule != Schedule::k2BW) return absl::OkStatus();
    return map.ErrorAt("eval_every",
                       "schedule 2bw never flushes the pipeline, so between steps the sites' "
                       "weights are never one consistent version to evaluate; remove eval_every "
                       "(the run is still evaluated after its last step) or use schedule 1f1b");
  }

  absl::Status ParseUpdateTiming(YamlMap& map) {
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

  static int LargestDivisorAtMost(int n, int limit) {
    for (int d = limit; d > 1; --d) {
      if (n % d == 0) return d;
    }
    return 1;
  }

  absl::Status ParseSites(YamlMap& root) {
    YAML::Node sites = root.Get("sites");
    if (!sites.IsDefined() || sites.IsNull()) {
      return root.Missing("sites", "a list of sites, each with id and layers: [start, end)");
    }
    if (!sites.IsSequence() || sites.size() == 0) {
      return root.ErrorAt("sites",
                          "expected a non-empty list of sites, found " + DescribeYamlNode(sites));
    }
    if (sites.size() > kMaxSites) {
      return root.ErrorAt("sites",
                          absl::StrCat("at most ", kMaxSites, " sites, found ", sites.size()));
    }
    const int num_layers = spec_.model.NumLayers();
    std::vector<YAML::Node> layer_nodes, tensor_nodes;
    for (size_t i = 0; i < sites.size(); ++i) {
      YamlMap map(file_, sites[i], absl::StrCat("sites[", i, "]"));
      STRAIT_RETURN_IF_ERROR(map.status());
      if (!sites[i].IsMap()) {
        return YamlError(file_, sites[i], map.path(),
                         "expected a mapping with id and layers, found nothing");
      }
      SiteSpec site;
      STRAIT_RETURN_IF_ERROR(map.String("id", &site.id, /*required=*/true));
      if (!IsSiteId(site.id)) {
        return map.ErrorAt("id",
                           "expected 1-63 lower-case letters, digits, '.', '_' or '-' (it names "
                           "the site's certificate and files), found '" +
                               site.id + "'");
      }
      if (int other = spec_.SiteIndex(site.id); other >= 0) {
        return map.ErrorAt("id", absl::StrCat("duplicate site id '", site.id, "' (also sites[",
                                              other, "]); site ids must be unique"));
      }
      if (map.Has("layers") && map.Get("layers").IsScalar() &&
          map.Get("layers").Scalar() == "auto") {
        site.plan_layers = true;  // The split planner assigns its range (plan/split_planner.h).
      } else {
        std::vector<int> range;
        STRAIT_RETURN_IF_ERROR(map.IntList("layers", 0, 1 << 20, 2, &range, /*required=*/true));
        site.layers = {range[0], range[1]};
      }
      layer_nodes.push_back(map.Get("layers"));
      STRAIT_RETURN_IF_ERROR(map.Enum(
          "device", {{"cpu", DeviceKind::kCpu}, {"cuda", DeviceKind::kCuda}}, &site.device));
      STRAIT_RETURN_IF_ERROR(map.Int("workers", 1, kMaxWorkers, &site.workers));
      STRAIT_RETURN_IF_ERROR(map.Int("machines", 1, kMaxMachines, &site.machines));
      STRAIT_RETURN_IF_ERROR(map.Int("tensor_parallel", 1, kMaxMachines, &site.tensor_parallel));
      tensor_nodes.push_back(map.Get("tensor_parallel"));
      STRAIT_RETURN_IF_ERROR(CheckSiteLayout(map, site));
      STRAIT_RETURN_IF_ERROR(map.Finish());
      spec_.sites.push_back(std::move(site));
    }
    STRAIT_RETURN_IF_ERROR(CheckLayerSplit(layer_nodes, num_layers));
    for (size_t i = 0; spec_.PlansSplit() && i < spec_.sites.size(); ++i) {
      if (spec_.sites[i].machines > 1) {
        return YamlError(file_, layer_nodes[i], absl::StrCat("sites[", i, "].layers"),
                         absl::StrCat("layers: auto plans sites of one machine each; site '",
                                      spec_.sites[i].id, "' has ", spec_.sites[i].machines,
                                      ": pin every site's layers, or run it on one machine"));
      }
    }
    if (spec_.training.plan_extra_in_flight && !spec_.PlansSplit()) {
      return YamlError(file_, extra_in_flight_node_, "training.extra_in_flight",
                       "auto is chosen by the split planner, which runs only when some site has "
                       "layers: auto; give a number instead (0 by default)");
    }
    // With the ranges known good: every split dimension of a tensor-parallel site divides (the
    // planner checks the ranges it gives).
    for (size_t i = 0; i < spec_.sites.size(); ++i) {
      const SiteSpec& site = spec_.sites[i];
      if (site.plan_layers) continue;
      if (absl::Status s = CheckTensorSplit(spec_.model, site.layers, site.tensor_parallel);
          !s.ok()) {
        return YamlError(file_, tensor_nodes[i], absl::StrCat("sites[", i, "].tensor_parallel"),
                         std::string(s.message()));
      }
    }
    return absl::OkStatus();
  }

  // How a site's machines and workers divide a microbatch and its layers (the model's sizes are
  // checked once the layer ranges are known good).
  absl::Status CheckSiteLayout(YamlMap& map, const SiteSpec& site) {
    if (site.machines % site.tensor_parallel != 0) {
      return map.ErrorAt(
          "tensor_parallel",
          absl::StrCat("machines: ", site.machines, " is not a multiple of ", site.tensor_parallel,
                       " (machines = tensor_parallel x data-parallel replicas)"));
    }
    if (site.tensor_parallel > 1 && (site.workers != 1 || site.device != DeviceKind::kCpu)) {
      return map.ErrorAt("tensor_parallel",
                         "tensor parallelism runs on CPU ranks of one worker each: set device: "
                         "cpu and workers: 1 (give each rank its threads with strait-site "
                         "--threads)");
    }
    const int microbatch = spec_.training.MicrobatchSize();
    if (site.workers > microbatch) {
      return map.ErrorAt("workers",
                         absl::StrCat(site.workers, " workers cannot share a microbatch of ",
                                      microbatch, " samples; use at most that many workers"));
    }
    if (site.parts() > microbatch) {
      return map.ErrorAt("machines",
                         absl::StrCat(site.replicas(), " replicas x ", site.workers,
                                      " workers cannot share a microbatch of ", microbatch,
                                      " samples; use fewer machines or workers"));
    }
    return absl::OkStatus();
  }

  // The sites' ranges, in order, must tile [0, num_layers) exactly. Sites with layers: auto take
  // what the pinned ranges leave, at least one layer each.
  absl::Status CheckLayerSplit(const std::vector<YAML::Node>& nodes, int num_layers) {
    auto range = [](const LayerRange& r) { return absl::StrCat("[", r.start, ", ", r.end, ")"); };
    const std::string rule =
        absl::StrCat("ranges must be contiguous and cover layers 0..", num_layers, " (the ",
                     ToString(spec_.model.family), " model has ", num_layers, " layers)");
    int next = 0;          // The first layer no earlier site holds.
    int planned = 0;       // Sites with layers: auto since the last pinned range.
    std::string previous;  // The last pinned range, for messages.
    // The `planned` sites before sites[i] (pinned at `end`; i past the last site: the model's
    // end) share [next, end): at least a layer each.
    auto check_gap = [&](int end, size_t i) -> absl::Status {
      if (end - next >= planned) return absl::OkStatus();
      const size_t at = std::min(i, spec_.sites.size() - 1);
      return YamlError(
          file_, nodes[at], absl::StrCat("sites[", at, "].layers"),
          absl::StrCat(planned, " site(s) with layers: auto before it (the last is '",
                       spec_.sites[i - 1].id, "') get no layers: the pinned ranges leave only [",
                       next, ", ", end, ")", previous.empty() ? "" : " after " + previous,
                       "; pin fewer layers or give those sites ranges"));
    };
    for (size_t i = 0; i < spec_.sites.size(); ++i) {
      const SiteSpec& site = spec_.sites[i];
      if (site.plan_layers) {
        ++planned;
        continue;
      }
      const LayerRange& r = site.layers;
      std::string path = absl::StrCat("sites[", i, "].layers");
      if (r.start >= r.end) {
        return YamlError(
            file_, nodes[i], path,
            absl::StrCat("range ", range(r), " is empty; a site needs at least one layer"));
      }
      if (r.end > num_layers) {
        return YamlError(file_, nodes[i], path,
                         absl::StrCat("range ", range(r), " goes past the last layer; ", rule));
      }
      if (r.start < next) {
        return YamlError(file_, nodes[i], path,
                         absl::StrCat("range ", range(r), " overlaps ", previous, "; ", rule));
      }
      if (r.start > next && planned == 0) {
        return YamlError(file_, nodes[i], path,
                         absl::StrCat("range ", range(r), " leaves layers [", next, ", ", r.start,
                                      ") to no site; ", rule));
      }
      STRAIT_RETURN_IF_ERROR(check_gap(r.start, i));
      next = r.end;
      planned = 0;
      previous = absl::StrCat("sites[", i, "] ", range(r));
    }
    const size_t last = spec_.sites.size() - 1;
    if (planned == 0 && next != num_layers) {
      return YamlError(file_, nodes.back(), absl::StrCat("sites[", last, "].layers"),
                       absl::StrCat("range ", range(spec_.sites.back().layers), " leaves layers [",
                                    next, ", ", num_layers, ") to no site; ", rule));
    }
    return check_gap(num_layers, last + 1);
  }

  absl::Status ParseLinks(YamlMap& root) {
    const size_t boundaries = spec_.sites.size() - 1;
    spec_.links.resize(boundaries);
    for (size_t b = 0; b < boundaries; ++b) spec_.links[b].boundary = static_cast<int>(b);
    YAML::Node links = root.Get("links");
    if (!links.IsDefined() || links.IsNull()) return absl::OkStatus();
    if (!links.IsSequence()) {
      return root.ErrorAt("links",
                          "expected a list of links, each with between: [site, next site], found " +
                              DescribeYamlNode(links));
    }
    std::vector<bool> seen(boundaries, false);
    for (size_t i = 0; i < links.size(); ++i) {
      YamlMap map(file_, links[i], absl::StrCat("links[", i, "]"));
      STRAIT_RETURN_IF_ERROR(map.status());
      YAML::Node between = map.Get("between");
      if (!between.IsDefined()) return map.Missing("between", "[site id, id of the next site]");
      std::string a, b;
      if (!between.IsSequence() || between.size() != 2 || !between[0].IsScalar() ||
          !between[1].IsScalar()) {
        return map.ErrorAt("between", "expected two site ids such as [dc-a, dc-b], found " +
                                          DescribeYamlNode(between));
      }
      a = between[0].Scalar(), b = between[1].Scalar();
      int ia = spec_.SiteIndex(a), ib = spec_.SiteIndex(b);
      if (ia < 0 || ib < 0) {
        return map.ErrorAt(
            "between", absl::StrCat("unknown site '", ia < 0 ? a : b, "'; sites are ", SiteList()));
      }
      if (ib != ia + 1) {
        return map.ErrorAt(
            "between",
            absl::StrCat("sites '", a, "' and '", b,
                         "' are not neighbours in stage order; a link joins "
                         "sites[i] and sites[i+1], e.g. [",
                         spec_.sites[0].id, ", ", spec_.sites[1 % spec_.sites.size()].id, "]"));
      }
      if (seen[ia]) {
        return map.ErrorAt("between", absl::StrCat("a second link between '", a, "' and '", b,
                                                   "'; describe each boundary once"));
      }
      seen[ia] = true;
      LinkSpec& link = spec_.links[ia];
      for (auto [key, chain] :
           {std::pair{"forward", &link.forward}, {"backward", &link.backward}}) {
        STRAIT_RETURN_IF_ERROR(map.String(key, chain));
        if (auto parsed = compression::ParseChainSpec(*chain); !parsed.ok()) {
          return map.ErrorAt(key, std::string(parsed.status().message()));
        }
      }
      STRAIT_RETURN_IF_ERROR(map.Bool("encryption", &link.encryption));
      STRAIT_RETURN_IF_ERROR(map.Bytes("rotate_bytes", 1 << 20, &link.rotate_bytes));
      STRAIT_RETURN_IF_ERROR(map.Finish());
    }
    return absl::OkStatus();
  }

  // 2bw keeps a stage's in-flight microbatches apart by their index within a step: stage s holds at
  // most S - s of them, consecutive across a step boundary, so they are distinct only when M >= S.
  absl::Status CheckSchedule(YamlMap& root) {
    const TrainingSpec& t = spec_.training;
    const int stages = static_cast<int>(spec_.sites.size());
    if (t.schedule != Schedule::k2BW || t.microbatches >= stages) return absl::OkStatus();
    YamlMap training = Section(root, "training");
    return training.ErrorAt(
        "microbatches",
        absl::StrCat("schedule 2bw needs at least as many microbatches as sites (", stages,
                     "), found ", t.microbatches,
                     ": the pipeline holds up to that many microbatches across a step boundary and "
                     "tells them apart by their index within the step; raise microbatches or use "
                     "schedule 1f1b"));
  }

  // The gateway's budget must hold at least one frame, or a producer could never push.
  absl::Status CheckMemoryBudget(YamlMap& root) {
    const uint64_t frame = MaxFrameWireBytes(spec_);
    if (spec_.gateway.memory_budget >= frame) return absl::OkStatus();
    YamlMap gateway = Section(root, "gateway");
    return gateway.ErrorAt("memory_budget",
                           absl::StrCat("a budget of ", spec_.gateway.memory_budget,
                                        " bytes cannot hold one frame of this job (up to ", frame,
                                        " bytes: one microbatch of activations",
                                        spec_.PlansSplit() ? ", or with layers: auto the state of "
                                                             "every layer, which may move after a "
                                                             "re-plan,"
                                                           : "",
                                        " plus codec and sealing overhead); raise it to at least ",
                                        (frame + (1 << 20) - 1) >> 20, "MiB"));
  }

  std::string SiteList() const {
    std::string out;
    for (const SiteSpec& s : spec_.sites) out += (out.empty() ? "" : ", ") + s.id;
    return out;
  }

  std::string file_;
  std::filesystem::path base_dir_;
  JobSpec spec_;
  YAML::Node extra_in_flight_node_;  // training.extra_in_flight when it says auto.
  // training.sync, outer and fixed_point_bits where given (they need replicas).
  std::vector<std::pair<std::string, YAML::Node>> sync_nodes_;
};

}  // namespace

absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view yaml_text, absl::string_view file_name,
                                     absl::string_view base_dir) {
  return JobSpecParser(file_name, base_dir).Parse(yaml_text);
}

}  // namespace strait
