#include "core/job_agreement.h"

#include <algorithm>
#include <charconv>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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

}  // namespace

std::string AgreedJobText(const JobSpec& spec) {
  std::string out;
  Line(out, "name", spec.name);
  const ModelSpec& m = spec.model;
  Line(out, "model.family", ToString(m.family));
  // The layout fixes every shape; activation, dropout and the seed are what it does not show.
  for (const LayerLayout& layer : BuildModelLayout(m)) {
    std::vector<std::string> params;
    for (const ParamLayout& p : layer.params) params.push_back(p.name + ShapeToString(p.shape));
    Line(out, absl::StrCat("model.layer", layer.index),
         absl::StrCat(layer.name, " ", ShapeToString(layer.in_shape), " -> ",
                      ShapeToString(layer.out_shape), " ", absl::StrJoin(params, " ")));
  }
  if (m.family == ModelFamily::kMlp) Line(out, "model.activation", ToString(m.mlp.activation));
  if (m.family == ModelFamily::kGpt) {
    Line(out, "model.tie_embeddings", m.gpt.tie_embeddings ? "true" : "false");
  }
  const float dropout = m.family == ModelFamily::kMlp   ? m.mlp.dropout
                        : m.family == ModelFamily::kVit ? m.vit.dropout
                                                        : m.gpt.dropout;
  Line(out, "model.dropout", Exact(dropout));
  Line(out, "model.init_seed", absl::StrCat(m.init_seed));
  Line(out, "data.dataset", ToString(spec.data.kind));
  Line(out, "data.seed", absl::StrCat(spec.data.seed));
  if (spec.data.kind == DatasetKind::kSynthetic) {
    Line(out, "data.train_size", absl::StrCat(spec.data.synthetic_train));
    Line(out, "data.test_size", absl::StrCat(spec.data.synthetic_test));
  }
  if (spec.data.kind == DatasetKind::kText) {
    // The file's path may differ between machines; the windows depend on the tokenizer kind and
    // the split (the sites check the vocabulary when they load the tokenizer).
    Line(out, "data.tokenizer", spec.data.tokenizer == "bytes" ? "bytes" : "sentencepiece");
    Line(out, "data.validation", Exact(spec.data.validation));
  }
  const TrainingSpec& t = spec.training;
  Line(out, "training.global_batch", absl::StrCat(t.global_batch));
  Line(out, "training.microbatches", absl::StrCat(t.microbatches));
  Line(out, "training.schedule", ToString(t.schedule));
  Line(out, "training.update", ToString(t.update));
  Line(out, "training.stale_gradients", ToString(t.stale_gradients));
  Line(out, "training.extra_in_flight",
       t.plan_extra_in_flight ? "auto" : absl::StrCat(t.extra_in_flight));
  Line(out, "training.lookahead", Exact(t.lookahead));
  Line(out, "training.grad_clip", Exact(t.grad_clip));
  Line(out, "training.precision", ToString(t.precision));
  // Sites that evaluate at different steps would wait for each other's evaluation frames forever.
  Line(out, "training.eval_every", absl::StrCat(t.eval_every));
  const OptimizerSpec& o = t.optimizer;
  Line(out, "training.optimizer.name", ToString(o.kind));
  Line(out, "training.optimizer.lr", Exact(o.lr));
  Line(out, "training.optimizer.momentum", Exact(o.momentum));
  Line(out, "training.optimizer.betas", absl::StrCat(Exact(o.beta1), ", ", Exact(o.beta2)));
  Line(out, "training.optimizer.eps", Exact(o.eps));
  Line(out, "training.optimizer.weight_decay", Exact(o.weight_decay));
  Line(out, "training.optimizer.warmup_steps", absl::StrCat(o.warmup_steps));
  Line(out, "training.optimizer.decay", ToString(o.decay));
  Line(out, "training.optimizer.decay_steps", absl::StrCat(o.decay_steps));
  for (int i = 0; i < spec.Stages(); ++i) {
    const SiteSpec& s = spec.sites[i];
    // Replica 0's ids: every replica's view of the job (JobSpec::ReplicaView) agrees.
    Line(out, absl::StrCat("sites.", spec.SiteIdAt(i)),
         absl::StrCat(
             // A planned split may change at a rollback (proto Rollback.split): not agreed here.
             s.plan_layers ? "layers auto"
             : spec.split_planned
                 ? "layers planned"
                 : absl::StrCat("layers [", s.layers.start, ", ", s.layers.end, ")"),
             " on ", ToString(s.device), " x", s.workers,
             s.machines > 1 ? absl::StrCat(" on ", s.machines, " machines") : "",
             s.tensor_parallel > 1 ? absl::StrCat(", tensor parallel ", s.tensor_parallel) : ""));
  }
  if (spec.Replicas() > 1) {
    std::vector<std::string> pipelines;
    for (const std::vector<std::string>& p : spec.replicas)
      pipelines.push_back(absl::StrJoin(p, " "));
    Line(out, "replicas", absl::StrJoin(pipelines, ", "));
    Line(out, "training.sync", ToString(t.sync));
    if (t.sync == ReplicaSync::kOuter) {
      Line(out, "training.outer",
           absl::StrCat("every ", t.outer.every, ", lr ", Exact(t.outer.lr), ", momentum ",
                        Exact(t.outer.momentum), ", ", t.outer.bits, " bits"));
    }
    Line(out, "training.fixed_point_bits", absl::StrCat(t.fixed_point_bits));
  }
  for (const LinkSpec& l : spec.links) {
    Line(out, absl::StrCat("links.", l.boundary),
         absl::StrCat("forward ", l.forward, ", backward ", l.backward,
                      l.encryption ? ", encrypted, rekey every " : ", not encrypted, ",
                      l.encryption ? absl::StrCat(l.rotate_bytes, " bytes") : ""));
  }
  return out;
}

std::string FirstDisagreement(absl::string_view ours, absl::string_view theirs,
                              absl::string_view ours_name) {
  const std::vector<absl::string_view> a = absl::StrSplit(ours, '\n', absl::SkipEmpty());
  const std::vector<absl::string_view> b = absl::StrSplit(theirs, '\n', absl::SkipEmpty());
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const absl::string_view x = i < a.size() ? a[i] : "(nothing)";
    const absl::string_view y = i < b.size() ? b[i] : "(nothing)";
    if (x == y) continue;
    // "key: theirs (name: ours)", the key once when both lines have it.
    const size_t key_end = x.find(": ");
    if (key_end != absl::string_view::npos &&
        y.substr(0, key_end + 2) == x.substr(0, key_end + 2)) {
      return absl::StrCat(y, " (", ours_name, ": ", x.substr(key_end + 2), ")");
    }
    return absl::StrCat(y, " (", ours_name, ": ", x, ")");
  }
  return "";
}

}  // namespace strait
