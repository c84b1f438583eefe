// ParseJobSpec: YAML text -> validated JobSpec (core/job_spec_parser.h): the top level and the
// gateway, dashboard, tls, model and data sections.
#include "core/job_spec_parser.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "compression/chain_spec.h"
#include "core/frame_header.h"
#include "core/job_fields.h"
#include "core/job_spec.h"
#include "core/status.h"
#include "core/tensor_split.h"
#include "core/yaml_reader.h"

namespace strait::job_spec_internal {

absl::StatusOr<JobSpec> JobSpecParser::Parse(absl::string_view text) {
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
  STRAIT_RETURN_IF_ERROR(ParseModel(map, spec_.model));
  STRAIT_RETURN_IF_ERROR(ParseData(map));
  STRAIT_RETURN_IF_ERROR(ParseTraining(map));
  STRAIT_RETURN_IF_ERROR(ParseSites(map));
  STRAIT_RETURN_IF_ERROR(ParseLinks(map));
  STRAIT_RETURN_IF_ERROR(ParseReplicas(map));
  STRAIT_RETURN_IF_ERROR(ParseTeacher(map));
  STRAIT_RETURN_IF_ERROR(ParseServing(map));
  STRAIT_RETURN_IF_ERROR(CheckSchedule(map));
  STRAIT_RETURN_IF_ERROR(Finish(map));
  STRAIT_RETURN_IF_ERROR(CheckMemoryBudget(map));
  return std::move(spec_);
}

// Relative paths are relative to the job spec's directory, so every process agrees on them.
std::string JobSpecParser::Resolve(const std::string& path) const {
  if (path.empty()) return path;
  std::filesystem::path p(path);
  return (p.is_absolute() ? p : base_dir_ / p).lexically_normal().string();
}

// The mapping under `key` (absent is fine: every section has defaults). Check status() after.
YamlMap JobSpecParser::Section(YamlMap& parent, absl::string_view key) {
  return YamlMap(file_, parent.Get(key), parent.PathOf(key));
}

absl::Status JobSpecParser::Finish(YamlMap& map) {
  for (const std::string& key : map.known()) {
    const std::string path = map.PathOf(key);
    if (FindJobField(path) == nullptr && !IsJobSection(path)) {
      return absl::InternalError(
          absl::StrCat("job spec key '", path,
                       "' is missing from the field table (core/job_fields.cc): say "
                       "whether every process of a federation must agree on it"));
    }
  }
  return map.Finish();
}

absl::Status JobSpecParser::CheckHostPort(YamlMap& map, absl::string_view key,
                                          const std::string& value) {
  static const std::regex kHostPort(R"(^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):([0-9]{1,5})$)");
  std::smatch m;
  if (!std::regex_match(value, m, kHostPort) || std::stoi(m[2]) > 65535) {
    return map.ErrorAt(
        key, "expected host:port such as 127.0.0.1:7443 or [::1]:7443, found '" + value + "'");
  }
  return absl::OkStatus();
}

absl::Status JobSpecParser::ParseName(YamlMap& map) {
  if (!map.Has("name")) return map.Missing("name", "the federation's name, e.g. name: fashion-3dc");
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

absl::Status JobSpecParser::ParseGateway(YamlMap& root) {
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
  return Finish(map);
}

absl::Status JobSpecParser::ParseDashboard(YamlMap& root) {
  YamlMap map = Section(root, "dashboard");
  STRAIT_RETURN_IF_ERROR(map.status());
  STRAIT_RETURN_IF_ERROR(map.String("address", &spec_.dashboard.address));
  STRAIT_RETURN_IF_ERROR(CheckHostPort(map, "address", spec_.dashboard.address));
  STRAIT_RETURN_IF_ERROR(map.String("token_file", &spec_.dashboard.token_file));
  spec_.dashboard.token_file = Resolve(spec_.dashboard.token_file);
  return Finish(map);
}

absl::Status JobSpecParser::ParseTls(YamlMap& root) {
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
  return Finish(map);
}

absl::Status JobSpecParser::ParseModel(YamlMap& root, ModelSpec& m) {
  YamlMap map = Section(root, "model");
  STRAIT_RETURN_IF_ERROR(map.status());
  if (!map.node().IsDefined())
    return root.Missing("model", "a mapping with 'family: mlp', 'vit', 'gpt' or 'llama'");
  STRAIT_RETURN_IF_ERROR(map.Enum("family",
                                  {{"mlp", ModelFamily::kMlp},
                                   {"vit", ModelFamily::kVit},
                                   {"gpt", ModelFamily::kGpt},
                                   {"llama", ModelFamily::kLlama}},
                                  &m.family, /*required=*/true));
  int64_t seed = static_cast<int64_t>(m.init_seed);
  STRAIT_RETURN_IF_ERROR(map.Int("init_seed", int64_t{0}, INT64_MAX, &seed));
  m.init_seed = static_cast<uint64_t>(seed);
  STRAIT_RETURN_IF_ERROR(map.String("init_from", &m.init_from));
  if (!m.init_from.empty()) {
    if (!m.IsLanguageModel()) {
      return map.ErrorAt("init_from",
                         "starts a gpt or llama from a Hugging Face model directory; "
                         "this family has no Hugging Face layout");
    }
    m.init_from = Resolve(m.init_from);
  }

  // Each family's own keys; a key of another family is an error that says so.
  const std::map<ModelFamily, std::vector<absl::string_view>> family_keys = {
      {ModelFamily::kMlp, {"input", "hidden", "activation", "classes", "dropout"}},
      {ModelFamily::kVit,
       {"image", "patch", "dim", "depth", "heads", "mlp_dim", "classes", "dropout"}},
      {ModelFamily::kGpt,
       {"vocab", "context", "dim", "depth", "heads", "mlp_dim", "dropout", "tie_embeddings"}},
      {ModelFamily::kLlama,
       {"vocab", "context", "dim", "depth", "heads", "kv_heads", "mlp_dim", "rope_theta",
        "norm_eps", "dropout", "tie_embeddings"}}};
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
  if (m.IsLanguageModel()) return ParseGpt(map, m.family, m.gpt);
  if (m.family == ModelFamily::kMlp) {
    MlpSpec& mlp = m.mlp;
    STRAIT_RETURN_IF_ERROR(map.Int("input", 1, kMaxWidth, &mlp.input));
    STRAIT_RETURN_IF_ERROR(map.IntList("hidden", 1, kMaxWidth, 0, &mlp.hidden, /*required=*/true));
    STRAIT_RETURN_IF_ERROR(map.Int("classes", 2, kMaxWidth, &mlp.classes));
    STRAIT_RETURN_IF_ERROR(map.Enum(
        "activation", {{"relu", Activation::kRelu}, {"gelu", Activation::kGelu}}, &mlp.activation));
    STRAIT_RETURN_IF_ERROR(map.Float("dropout", 0.0, 0.95, &mlp.dropout));
  } else {
    VitSpec& v = m.vit;
    std::vector<int> image = {v.channels, v.height, v.width};
    STRAIT_RETURN_IF_ERROR(map.IntList("image", 1, 4096, 3, &image));
    v.channels = image[0], v.height = image[1], v.width = image[2];
    STRAIT_RETURN_IF_ERROR(map.Int("patch", 1, 4096, &v.patch, /*required=*/true));
    if (v.height % v.patch != 0 || v.width % v.patch != 0) {
      return map.ErrorAt(
          "patch", absl::StrCat("patch size ", v.patch, " must divide the image height ", v.height,
                                " and width ", v.width));
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
  return Finish(map);
}

absl::Status JobSpecParser::ParseGpt(YamlMap& map, ModelFamily family, GptSpec& g) {
  STRAIT_RETURN_IF_ERROR(map.Int("vocab", 2, kMaxWidth, &g.vocab));
  STRAIT_RETURN_IF_ERROR(map.Int("context", 1, 65536, &g.context, /*required=*/true));
  STRAIT_RETURN_IF_ERROR(map.Int("dim", 1, 65536, &g.dim, /*required=*/true));
  STRAIT_RETURN_IF_ERROR(map.Int("depth", 1, kMaxDepth, &g.depth, /*required=*/true));
  STRAIT_RETURN_IF_ERROR(map.Int("heads", 1, 1024, &g.heads, /*required=*/true));
  if (g.dim % g.heads != 0) {
    return map.ErrorAt("heads",
                       absl::StrCat("dim ", g.dim, " must be divisible by heads ", g.heads));
  }
  const bool llama = family == ModelFamily::kLlama;
  g.mlp_dim = 4 * g.dim;
  STRAIT_RETURN_IF_ERROR(map.Int("mlp_dim", 1, kMaxWidth, &g.mlp_dim, /*required=*/llama));
  STRAIT_RETURN_IF_ERROR(map.Float("dropout", 0.0, 0.95, &g.dropout));
  STRAIT_RETURN_IF_ERROR(map.Bool("tie_embeddings", &g.tie_embeddings));
  g.kv_heads = g.heads;
  if (llama) {
    STRAIT_RETURN_IF_ERROR(map.Int("kv_heads", 1, 1024, &g.kv_heads));
    if (g.heads % g.kv_heads != 0) {
      return map.ErrorAt(
          "kv_heads", absl::StrCat("heads ", g.heads, " must be divisible by kv_heads ", g.kv_heads,
                                   " (each key/value head serves as many query "
                                   "heads)"));
    }
    if (g.head_dim() % 2 != 0) {
      return map.ErrorAt("heads", absl::StrCat("rotary positions rotate pairs of a head's ",
                                               g.head_dim(), " columns: dim / heads must be even"));
    }
    STRAIT_RETURN_IF_ERROR(map.Double("rope_theta", 1.0, 1e9, &g.rope_theta));
    STRAIT_RETURN_IF_ERROR(map.Float("norm_eps", 1e-12, 0.1, &g.norm_eps));
  }
  return Finish(map);
}

absl::Status JobSpecParser::ParseData(YamlMap& root) {
  YamlMap map = Section(root, "data");
  STRAIT_RETURN_IF_ERROR(map.status());
  DataSpec& d = spec_.data;
  const ModelSpec& m = spec_.model;
  const bool gpt = m.IsLanguageModel();
  if (gpt) d.kind = DatasetKind::kText;
  STRAIT_RETURN_IF_ERROR(map.Enum("dataset",
                                  {{"fashion-mnist", DatasetKind::kFashionMnist},
                                   {"synthetic", DatasetKind::kSynthetic},
                                   {"text", DatasetKind::kText}},
                                  &d.kind));
  if (gpt != (d.kind == DatasetKind::kText)) {
    return map.ErrorAt("dataset", gpt ? "language models (gpt, llama) train on 'dataset: text'"
                                      : "'dataset: text' is for 'family: gpt' or 'llama'");
  }
  const bool text = d.kind == DatasetKind::kText;
  STRAIT_RETURN_IF_ERROR(map.String("path", &d.path, /*required=*/text));
  d.path = Resolve(d.path);
  int64_t seed = static_cast<int64_t>(d.seed);
  STRAIT_RETURN_IF_ERROR(map.Int("seed", int64_t{0}, INT64_MAX, &seed));
  d.seed = static_cast<uint64_t>(seed);
  for (absl::string_view key : {"format", "tokenizer", "validation"}) {
    if (!text && map.Has(key)) return map.ErrorAt(key, "only for 'dataset: text'");
    map.Allow(key);
  }
  if (text) {
    STRAIT_RETURN_IF_ERROR(map.Enum(
        "format", {{"text", DataFormat::kText}, {"tokens", DataFormat::kTokens}}, &d.format));
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
  if (text) return Finish(map);
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
  return Finish(map);
}

}  // namespace strait::job_spec_internal

namespace strait::job_spec_internal {

bool IsSiteId(const std::string& id) {
  static const std::regex kId("^[a-z0-9][a-z0-9._-]{0,62}$");
  return std::regex_match(id, kId);
}

}  // namespace strait::job_spec_internal

namespace strait {

absl::StatusOr<JobSpec> ParseJobSpec(absl::string_view yaml_text, absl::string_view file_name,
                                     absl::string_view base_dir) {
  return job_spec_internal::JobSpecParser(file_name, base_dir).Parse(yaml_text);
}

}  // namespace strait
