// ParseJobSpec (core/job_spec_parser.h): the teacher of knowledge sharing and training.distill.
#include <set>

#include "absl/strings/str_cat.h"
#include "core/job_spec.h"
#include "core/job_spec_parser.h"
#include "core/status.h"
#include "core/yaml_reader.h"

namespace strait::job_spec_internal {

absl::Status JobSpecParser::ParseDistill(YamlMap& training) {
  YamlMap map = Section(training, "distill");
  STRAIT_RETURN_IF_ERROR(map.status());
  if (map.node().IsDefined()) distill_node_ = map.node();
  DistillSpec& d = spec_.training.distill;
  STRAIT_RETURN_IF_ERROR(map.Double("alpha", 0.0, 1.0, &d.alpha));
  STRAIT_RETURN_IF_ERROR(map.Double("temperature", 0.05, 100.0, &d.temperature));
  return Finish(map);
}

absl::Status JobSpecParser::ParseTeacher(YamlMap& root) {
  YamlMap map = Section(root, "teacher");
  STRAIT_RETURN_IF_ERROR(map.status());
  if (!map.node().IsDefined()) {
    if (!distill_node_) return absl::OkStatus();
    return YamlError(file_, *distill_node_, "training.distill",
                     "applies only with a teacher: add a 'teacher:' section, or remove it");
  }
  spec_.has_teacher = true;
  TeacherSpec& t = spec_.teacher;
  // The teacher's targets go to the one pipeline's last stage, on one machine (DistillLoss).
  if (spec_.Replicas() > 1) {
    return root.ErrorAt("teacher", "a job with replicas cannot have a teacher yet");
  }
  if (spec_.PlansSplit()) {  // Teacher sites keep their layers; the student's would move.
    return root.ErrorAt("teacher",
                        "a job with a teacher cannot plan its split (layers: auto) yet: "
                        "give each site its layers");
  }
  if (spec_.sites.back().machines > 1) {
    return root.ErrorAt("teacher", absl::StrCat("the student's last site '", spec_.sites.back().id,
                                                "' runs on ", spec_.sites.back().machines,
                                                " machines; a teacher's student must end on one"));
  }
  STRAIT_RETURN_IF_ERROR(ParseModel(map, t.model));
  if (!t.model.init_from.empty()) {
    return map.ErrorAt("model",
                       "a teacher's parameters are its teacher.checkpoint; remove "
                       "model.init_from from the teacher");
  }
  const ModelSpec& student = spec_.model;
  if (t.model.Classes() != student.Classes()) {
    return map.ErrorAt(
        "model", absl::StrCat("the teacher predicts ", t.model.Classes(), " classes, the student ",
                              student.Classes(),
                              ": a teacher must have the student's vocabulary (and tokenizer)"));
  }
  if (t.model.InputFeatures() != student.InputFeatures() ||
      t.model.TargetsPerSample() != student.TargetsPerSample()) {
    return map.ErrorAt(
        "model",
        absl::StrCat("the teacher reads samples of ", t.model.InputFeatures(), " values with ",
                     t.model.TargetsPerSample(), " targets, the student's have ",
                     student.InputFeatures(), " and ", student.TargetsPerSample(),
                     ": a teacher reads the student's batches (same input size, and the "
                     "same context for a language model)"));
  }
  std::string tokenizer = spec_.data.tokenizer;
  STRAIT_RETURN_IF_ERROR(map.String("tokenizer", &tokenizer));
  if (map.Has("tokenizer") && spec_.data.kind != DatasetKind::kText) {
    return map.ErrorAt("tokenizer", "applies to text data only (data.dataset: text)");
  }
  if (tokenizer != "bytes") tokenizer = Resolve(tokenizer);
  if (tokenizer != spec_.data.tokenizer) {
    return map.ErrorAt("tokenizer",
                       absl::StrCat("the teacher was trained with tokenizer '", tokenizer,
                                    "', the student reads its data with '", spec_.data.tokenizer,
                                    "': a teacher must share the student's tokenizer"));
  }
  STRAIT_RETURN_IF_ERROR(map.String("checkpoint", &t.checkpoint, /*required=*/true));
  t.checkpoint = Resolve(t.checkpoint);
  STRAIT_RETURN_IF_ERROR(map.Int("top_k", 1, std::min(student.Classes(), 4096), &t.top_k));
  STRAIT_RETURN_IF_ERROR(map.Enum(
      "values", {{"fp16", TeacherValues::kFp16}, {"int8", TeacherValues::kInt8}}, &t.values));
  STRAIT_RETURN_IF_ERROR(ParseTeacherSites(map));
  return Finish(map);
}

absl::Status JobSpecParser::ParseTeacherSites(YamlMap& teacher) {
  YAML::Node sites = teacher.Get("sites");
  if (!sites.IsDefined() || sites.IsNull()) {
    return teacher.Missing("sites", "the sites that hold the teacher, e.g. [{id: teacher-a}]");
  }
  if (!sites.IsSequence() || sites.size() == 0 || sites.size() > kMaxSites) {
    return teacher.ErrorAt("sites", absl::StrCat("expected a list of 1 to ", kMaxSites,
                                                 " sites, found ", DescribeYamlNode(sites)));
  }
  const int num_layers = spec_.teacher.model.NumLayers();
  std::set<std::string> ids;
  int next_layer = 0;
  for (size_t i = 0; i < sites.size(); ++i) {
    YamlMap map(file_, sites[i], absl::StrCat(teacher.path(), ".sites[", i, "]"));
    STRAIT_RETURN_IF_ERROR(map.status());
    SiteSpec site;
    STRAIT_RETURN_IF_ERROR(map.String("id", &site.id, /*required=*/true));
    if (!IsSiteId(site.id)) {
      return map.ErrorAt(
          "id",
          "expected 1-63 lower-case letters, digits, '.', '_' or '-', found '" + site.id + "'");
    }
    if (spec_.SiteSlot(site.id) >= 0 || !ids.insert(site.id).second) {
      return map.ErrorAt("id", absl::StrCat("site id '", site.id,
                                            "' is taken (by a student site or another teacher "
                                            "site); every site of a federation has its own"));
    }
    if (sites.size() == 1 && !map.Has("layers")) {
      site.layers = {0, num_layers};
    } else {
      std::vector<int> range;
      STRAIT_RETURN_IF_ERROR(map.IntList("layers", 0, 1 << 20, 2, &range, /*required=*/true));
      site.layers = {range[0], range[1]};
    }
    const bool last = i + 1 == sites.size();
    if (site.layers.start != next_layer || site.layers.end <= site.layers.start ||
        site.layers.end > num_layers || (last && site.layers.end != num_layers)) {
      return map.ErrorAt(
          "layers", absl::StrCat("the teacher's sites must cover its ", num_layers,
                                 " layers in order: this one should start at layer ", next_layer,
                                 last ? absl::StrCat(" and end at ", num_layers) : "", ", found [",
                                 site.layers.start, ", ", site.layers.end, ")"));
    }
    next_layer = site.layers.end;
    STRAIT_RETURN_IF_ERROR(
        map.Enum("device", {{"cpu", DeviceKind::kCpu}, {"cuda", DeviceKind::kCuda}}, &site.device));
    STRAIT_RETURN_IF_ERROR(map.Int("workers", 1, kMaxWorkers, &site.workers));
    STRAIT_RETURN_IF_ERROR(Finish(map));
    spec_.teacher.sites.push_back(std::move(site));
  }
  return absl::OkStatus();
}

}  // namespace strait::job_spec_internal
