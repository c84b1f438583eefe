#include "core/job_fields.h"

#include <charconv>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model_layout.h"

namespace strait {
namespace {

// The shortest text that reads back as the same double.
std::string Exact(double v) {
  char text[32];
  const std::to_chars_result end = std::to_chars(text, text + sizeof(text), v);
  return std::string(text, end.ptr);
}

void Line(std::string& out, absl::string_view key, absl::string_view value) {
  absl::StrAppend(&out, key, ": ", value, "\n");
}

// The layout fixes every shape; activation, dropout and the seed are what it does not show.
void ModelLayers(const JobSpec& spec, bool /*split_planned*/, std::string& out) {
  for (const LayerLayout& layer : BuildModelLayout(spec.model)) {
    std::vector<std::string> params;
    for (const ParamLayout& p : layer.params) params.push_back(p.name + ShapeToString(p.shape));
    Line(out, absl::StrCat("model.layer", layer.index),
         absl::StrCat(layer.name, " ", ShapeToString(layer.in_shape), " -> ",
                      ShapeToString(layer.out_shape), " ", absl::StrJoin(params, " ")));
  }
}

float Dropout(const ModelSpec& m) {
  return m.family == ModelFamily::kMlp   ? m.mlp.dropout
         : m.family == ModelFamily::kVit ? m.vit.dropout
                                         : m.gpt.dropout;
}

void Sites(const JobSpec& spec, bool split_planned, std::string& out) {
  for (int i = 0; i < spec.Stages(); ++i) {
    const SiteSpec& s = spec.sites[i];
    // Replica 0's ids: every replica's site agrees. A planned split may change at a rollback
    // (proto Rollback.split): not agreed here; before the plan, `auto` and the pinned ranges are.
    const std::string layers =
        split_planned   ? "layers planned"
        : s.plan_layers ? "layers auto"
                        : absl::StrCat("layers [", s.layers.start, ", ", s.layers.end, ")");
    Line(out, absl::StrCat("sites.", spec.SiteIdAt(i)),
         absl::StrCat(
             layers, " on ", ToString(s.device), " x", s.workers,
             s.machines > 1 ? absl::StrCat(" on ", s.machines, " machines") : "",
             s.tensor_parallel > 1 ? absl::StrCat(", tensor parallel ", s.tensor_parallel) : ""));
  }
}

void Links(const JobSpec& spec, bool /*split_planned*/, std::string& out) {
  for (const LinkSpec& l : spec.links) {
    Line(out, absl::StrCat("links.", l.boundary),
         absl::StrCat("forward ", l.forward, ", backward ", l.backward,
                      l.encryption ? ", encrypted, rekey every " : ", not encrypted, ",
                      l.encryption ? absl::StrCat(l.rotate_bytes, " bytes") : ""));
  }
}

void Replicas(const JobSpec& spec, bool /*split_planned*/, std::string& out) {
  if (spec.Replicas() == 1) return;
  std::vector<std::string> pipelines;
  for (const std::vector<std::string>& p : spec.replicas)
    pipelines.push_back(absl::StrJoin(p, " "));
  Line(out, "replicas", absl::StrJoin(pipelines, ", "));
  const TrainingSpec& t = spec.training;
  Line(out, "training.sync", ToString(t.sync));
  if (t.sync == ReplicaSync::kOuter) {
    Line(out, "training.outer",
         absl::StrCat("every ", t.outer.every, ", lr ", Exact(t.outer.lr), ", momentum ",
                      Exact(t.outer.momentum), ", ", t.outer.bits, " bits, ", t.outer.fragments,
                      " fragment(s), delay ", t.outer.delay));
  }
  Line(out, "training.fixed_point_bits", absl::StrCat(t.fixed_point_bits));
}

// The teacher's model, sites and what it sends; the loss the student makes of it.
void Teacher(const JobSpec& spec, bool /*split_planned*/, std::string& out) {
  if (!spec.has_teacher) return;
  const TeacherSpec& t = spec.teacher;
  Line(out, "teacher.model.family", ToString(t.model.family));
  for (const LayerLayout& layer : BuildModelLayout(t.model)) {
    std::vector<std::string> params;
    for (const ParamLayout& p : layer.params) params.push_back(p.name + ShapeToString(p.shape));
    Line(out, absl::StrCat("teacher.model.layer", layer.index),
         absl::StrCat(layer.name, " ", absl::StrJoin(params, " ")));
  }
  if (t.model.family == ModelFamily::kLlama) {
    Line(out, "teacher.model.rope_theta", Exact(t.model.gpt.rope_theta));
    Line(out, "teacher.model.norm_eps", Exact(t.model.gpt.norm_eps));
  }
  for (const SiteSpec& s : t.sites) {
    Line(out, absl::StrCat("teacher.sites.", s.id),
         absl::StrCat("layers [", s.layers.start, ", ", s.layers.end, ")"));
  }
  Line(out, "teacher.sends", absl::StrCat("top ", t.top_k, " as ", ToString(t.values)));
  Line(out, "training.distill",
       absl::StrCat("alpha ", Exact(spec.training.distill.alpha), ", temperature ",
                    Exact(spec.training.distill.temperature)));
}

// A line of one value: `expr` of the spec `s`.
#define STRAIT_AGREED(key, expr)                                                \
  AgreedLine {                                                                  \
    key, [](const JobSpec& s, bool, std::string& out) { Line(out, key, expr); } \
  }

}  // namespace

const std::vector<AgreedLine>& AgreedLines() {
  static const std::vector<AgreedLine> lines = {
      STRAIT_AGREED("name", s.name),
      STRAIT_AGREED("model.family", ToString(s.model.family)),
      {"model.layer", ModelLayers},
      {"model.activation",
       [](const JobSpec& s, bool, std::string& out) {
         if (s.model.family == ModelFamily::kMlp) {
           Line(out, "model.activation", ToString(s.model.mlp.activation));
         }
       }},
      {"model.tie_embeddings",
       [](const JobSpec& s, bool, std::string& out) {
         if (s.model.IsLanguageModel()) {
           Line(out, "model.tie_embeddings", s.model.gpt.tie_embeddings ? "true" : "false");
         }
       }},
      {"model.llama",  // llama's positions and norms (its shapes are in model.layer)
       [](const JobSpec& s, bool, std::string& out) {
         if (s.model.family == ModelFamily::kLlama) {
           Line(out, "model.rope_theta", Exact(s.model.gpt.rope_theta));
           Line(out, "model.norm_eps", Exact(s.model.gpt.norm_eps));
         }
       }},
      STRAIT_AGREED("model.dropout", Exact(Dropout(s.model))),
      STRAIT_AGREED("model.init_seed", absl::StrCat(s.model.init_seed)),
      {"model.init_from",  // whether; the directory is a path of each machine's
       [](const JobSpec& s, bool, std::string& out) {
         if (!s.model.init_from.empty()) {
           Line(out, "model.init_from", "a Hugging Face model directory");
         }
       }},
      STRAIT_AGREED("data.dataset", ToString(s.data.kind)),
      STRAIT_AGREED("data.seed", absl::StrCat(s.data.seed)),
      {"data.synthetic",
       [](const JobSpec& s, bool, std::string& out) {
         if (s.data.kind != DatasetKind::kSynthetic) return;
         Line(out, "data.train_size", absl::StrCat(s.data.synthetic_train));
         Line(out, "data.test_size", absl::StrCat(s.data.synthetic_test));
       }},
      // The file's path may differ between machines; the windows depend on the tokenizer kind and
      // the split (the sites check the vocabulary when they load the tokenizer).
      {"data.text",
       [](const JobSpec& s, bool, std::string& out) {
         if (s.data.kind != DatasetKind::kText) return;
         Line(out, "data.format", ToString(s.data.format));
         Line(out, "data.tokenizer", s.data.tokenizer == "bytes" ? "bytes" : "sentencepiece");
         Line(out, "data.validation", Exact(s.data.validation));
       }},
      STRAIT_AGREED("training.global_batch", absl::StrCat(s.training.global_batch)),
      STRAIT_AGREED("training.microbatches", absl::StrCat(s.training.microbatches)),
      STRAIT_AGREED("training.schedule", ToString(s.training.schedule)),
      STRAIT_AGREED("training.update", ToString(s.training.update)),
      STRAIT_AGREED("training.stale_gradients", ToString(s.training.stale_gradients)),
      STRAIT_AGREED("training.extra_in_flight", s.training.plan_extra_in_flight
                                                    ? std::string("auto")
                                                    : absl::StrCat(s.training.extra_in_flight)),
      STRAIT_AGREED("training.lookahead", Exact(s.training.lookahead)),
      STRAIT_AGREED("training.grad_clip", Exact(s.training.grad_clip)),
      STRAIT_AGREED("training.precision", ToString(s.training.precision)),
      // Sites that evaluate at different steps would wait for each other's evaluation frames.
      STRAIT_AGREED("training.eval_every", absl::StrCat(s.training.eval_every)),
      STRAIT_AGREED("training.optimizer.name", ToString(s.training.optimizer.kind)),
      STRAIT_AGREED("training.optimizer.lr", Exact(s.training.optimizer.lr)),
      STRAIT_AGREED("training.optimizer.momentum", Exact(s.training.optimizer.momentum)),
      STRAIT_AGREED(
          "training.optimizer.betas",
          absl::StrCat(Exact(s.training.optimizer.beta1), ", ", Exact(s.training.optimizer.beta2))),
      STRAIT_AGREED("training.optimizer.eps", Exact(s.training.optimizer.eps)),
      STRAIT_AGREED("training.optimizer.weight_decay", Exact(s.training.optimizer.weight_decay)),
      STRAIT_AGREED("training.optimizer.warmup_steps",
                    absl::StrCat(s.training.optimizer.warmup_steps)),
      STRAIT_AGREED("training.optimizer.decay", ToString(s.training.optimizer.decay)),
      STRAIT_AGREED("training.optimizer.decay_steps",
                    absl::StrCat(s.training.optimizer.decay_steps)),
      {"sites", Sites},
      {"replicas", Replicas},
      {"links", Links},
      {"teacher", Teacher},
  };
  return lines;
}

#undef STRAIT_AGREED

namespace {

// The teacher of knowledge sharing: all agreed, but where its checkpoint lies.
std::vector<JobField> TeacherFields() {
  return {
      {"teacher.model.family", "teacher"},
      {"teacher.model.input", "teacher"},
      {"teacher.model.hidden", "teacher"},
      {"teacher.model.classes", "teacher"},
      {"teacher.model.image", "teacher"},
      {"teacher.model.patch", "teacher"},
      {"teacher.model.dim", "teacher"},
      {"teacher.model.depth", "teacher"},
      {"teacher.model.heads", "teacher"},
      {"teacher.model.mlp_dim", "teacher"},
      {"teacher.model.vocab", "teacher"},
      {"teacher.model.context", "teacher"},
      {"teacher.model.activation", "teacher"},
      {"teacher.model.tie_embeddings", "teacher"},
      {"teacher.model.dropout", "teacher"},
      {"teacher.model.init_seed", "teacher"},
      {"teacher.model.init_from", "teacher"},
      {"teacher.model.kv_heads", "teacher"},
      {"teacher.model.rope_theta", "teacher"},
      {"teacher.model.norm_eps", "teacher"},
      {"teacher.checkpoint", ""},
      {"teacher.tokenizer", "teacher"},
      {"teacher.top_k", "teacher"},
      {"teacher.values", "teacher"},
      {"teacher.sites[].id", "teacher"},
      {"teacher.sites[].layers", "teacher"},
      {"teacher.sites[].device", "teacher"},
      {"teacher.sites[].workers", "teacher"},
      {"training.distill.alpha", "teacher"},
      {"training.distill.temperature", "teacher"},
  };
}

// How replicas agree (training.sync and its keys).
std::vector<JobField> ReplicaFields() {
  return {
      {"training.sync", "replicas"},        {"training.outer.every", "replicas"},
      {"training.outer.lr", "replicas"},    {"training.outer.momentum", "replicas"},
      {"training.outer.bits", "replicas"},  {"training.outer.fragments", "replicas"},
      {"training.outer.delay", "replicas"}, {"training.fixed_point_bits", "replicas"},
  };
}

}  // namespace

const std::vector<JobField>& JobFields() {
  // Left out of the agreement, as they legitimately differ between the files of one federation:
  // addresses, paths, certificates, the dashboard, checkpoint and gateway settings, and the run's
  // length (the sites agree on it among themselves: JoinRequest.total_steps).
  static const std::vector<JobField> fields = {
      {"name", "name"},
      {"gateway.address", ""},
      {"gateway.listen", ""},
      {"gateway.memory_budget", ""},
      {"gateway.heartbeat_timeout", ""},
      {"gateway.chunk_size", ""},
      {"gateway.replan_share", ""},
      {"dashboard.address", ""},
      {"dashboard.token_file", ""},
      {"tls.ca", ""},
      {"tls.gateway_cert", ""},
      {"tls.gateway_key", ""},
      {"tls.site_cert", ""},
      {"tls.site_key", ""},
      {"tls.deny_list", ""},
      // Who may ask a serving federation: the gateway alone decides.
      {"serving.clients", ""},
      {"model.family", "model.family"},
      {"model.input", "model.layer"},
      {"model.hidden", "model.layer"},
      {"model.classes", "model.layer"},
      {"model.image", "model.layer"},
      {"model.patch", "model.layer"},
      {"model.dim", "model.layer"},
      {"model.depth", "model.layer"},
      {"model.heads", "model.layer"},
      {"model.mlp_dim", "model.layer"},
      {"model.vocab", "model.layer"},
      {"model.context", "model.layer"},
      {"model.activation", "model.activation"},
      {"model.tie_embeddings", "model.tie_embeddings"},
      {"model.dropout", "model.dropout"},
      {"model.init_seed", "model.init_seed"},
      {"model.init_from", "model.init_from"},
      {"model.kv_heads", "model.layer"},
      {"model.rope_theta", "model.llama"},
      {"model.norm_eps", "model.llama"},
      {"data.dataset", "data.dataset"},
      {"data.path", ""},
      {"data.seed", "data.seed"},
      {"data.train_size", "data.synthetic"},
      {"data.test_size", "data.synthetic"},
      {"data.format", "data.text"},
      {"data.tokenizer", "data.text"},
      {"data.validation", "data.text"},
      {"training.steps", ""},
      {"training.epochs", ""},
      {"training.global_batch", "training.global_batch"},
      {"training.microbatches", "training.microbatches"},
      {"training.schedule", "training.schedule"},
      {"training.update", "training.update"},
      {"training.stale_gradients", "training.stale_gradients"},
      {"training.extra_in_flight", "training.extra_in_flight"},
      {"training.lookahead", "training.lookahead"},
      {"training.grad_clip", "training.grad_clip"},
      {"training.precision", "training.precision"},
      {"training.eval_every", "training.eval_every"},
      {"training.optimizer.name", "training.optimizer.name"},
      {"training.optimizer.lr", "training.optimizer.lr"},
      {"training.optimizer.momentum", "training.optimizer.momentum"},
      {"training.optimizer.betas", "training.optimizer.betas"},
      {"training.optimizer.eps", "training.optimizer.eps"},
      {"training.optimizer.weight_decay", "training.optimizer.weight_decay"},
      {"training.optimizer.warmup_steps", "training.optimizer.warmup_steps"},
      {"training.optimizer.decay", "training.optimizer.decay"},
      {"training.optimizer.decay_steps", "training.optimizer.decay_steps"},
      {"training.checkpoint.every", ""},
      {"training.checkpoint.dir", ""},
      {"training.checkpoint.keep", ""},
      {"sites[].id", "sites"},
      {"sites[].layers", "sites"},
      {"sites[].device", "sites"},
      {"sites[].workers", "sites"},
      {"sites[].machines", "sites"},
      {"sites[].tensor_parallel", "sites"},
      {"links[].between", "links"},
      {"links[].forward", "links"},
      {"links[].backward", "links"},
      {"links[].encryption", "links"},
      {"links[].rotate_bytes", "links"},
      {"replicas", "replicas"},
  };
  static const std::vector<JobField> all = [] {
    std::vector<JobField> joined = fields;
    for (const JobField& f : ReplicaFields()) joined.push_back(f);
    for (const JobField& f : TeacherFields()) joined.push_back(f);
    return joined;
  }();
  return all;
}

namespace {

// "sites[2].layers" -> "sites[].layers".
std::string General(absl::string_view path) {
  static const std::regex kIndex(R"(\[[0-9]+\])");
  return std::regex_replace(std::string(path), kIndex, "[]");
}

}  // namespace

const JobField* FindJobField(absl::string_view path) {
  const std::string general = General(path);
  for (const JobField& field : JobFields()) {
    if (field.path == general) return &field;
  }
  return nullptr;
}

bool IsJobSection(absl::string_view path) {
  const std::string general = General(path);
  for (const JobField& field : JobFields()) {
    if (absl::StartsWith(field.path, general + ".") ||
        absl::StartsWith(field.path, general + "[]")) {
      return true;
    }
  }
  return false;
}

}  // namespace strait
