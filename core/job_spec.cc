#include "core/job_spec.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "compression/chain_spec.h"

namespace strait {

const char* ToString(ModelFamily v) {
  switch (v) {
    case ModelFamily::kMlp:
      return "mlp";
    case ModelFamily::kVit:
      return "vit";
    case ModelFamily::kGpt:
      return "gpt";
    case ModelFamily::kLlama:
      return "llama";
  }
  return "?";
}
const char* ToString(Activation v) { return v == Activation::kRelu ? "relu" : "gelu"; }
const char* ToString(DatasetKind v) {
  switch (v) {
    case DatasetKind::kFashionMnist:
      return "fashion-mnist";
    case DatasetKind::kSynthetic:
      return "synthetic";
    case DatasetKind::kText:
      return "text";
  }
  return "?";
}
const char* ToString(DataFormat v) { return v == DataFormat::kTokens ? "tokens" : "text"; }
const char* ToString(Schedule v) {
  switch (v) {
    case Schedule::k1F1B:
      return "1f1b";
    case Schedule::kGPipe:
      return "gpipe";
    case Schedule::k2BW:
      return "2bw";
  }
  return "?";
}
const char* ToString(UpdateTiming v) { return v == UpdateTiming::kEager ? "eager" : "deferred"; }
const char* ToString(StaleGradients v) { return v == StaleGradients::kDrop ? "drop" : "keep"; }
const char* ToString(OptimizerKind v) { return v == OptimizerKind::kSgd ? "sgd" : "adamw"; }
const char* ToString(LrDecay v) { return v == LrDecay::kCosine ? "cosine" : "none"; }
const char* ToString(DeviceKind v) { return v == DeviceKind::kCpu ? "cpu" : "cuda"; }
const char* ToString(Precision v) { return v == Precision::kBf16 ? "bf16" : "fp32"; }
const char* ToString(ReplicaSync v) { return v == ReplicaSync::kOuter ? "outer" : "every_step"; }
const char* ToString(TeacherValues v) { return v == TeacherValues::kInt8 ? "int8" : "fp16"; }

OptimizerSpec WithDecayHorizon(OptimizerSpec optimizer, int64_t total_steps) {
  if (optimizer.decay_steps == 0) optimizer.decay_steps = total_steps;
  return optimizer;
}

int ModelSpec::NumLayers() const {
  switch (family) {
    case ModelFamily::kMlp:
      return static_cast<int>(mlp.hidden.size()) + 1;
    case ModelFamily::kVit:
      return vit.depth + 2;
    case ModelFamily::kGpt:
    case ModelFamily::kLlama:
      return gpt.depth + 2;
  }
  return 0;
}

int ModelSpec::InputFeatures() const {
  switch (family) {
    case ModelFamily::kMlp:
      return mlp.input;
    case ModelFamily::kVit:
      return vit.channels * vit.height * vit.width;
    case ModelFamily::kGpt:
    case ModelFamily::kLlama:
      return gpt.context;
  }
  return 0;
}

int ModelSpec::Classes() const {
  switch (family) {
    case ModelFamily::kMlp:
      return mlp.classes;
    case ModelFamily::kVit:
      return vit.classes;
    case ModelFamily::kGpt:
    case ModelFamily::kLlama:
      return gpt.vocab;
  }
  return 0;
}

int ModelSpec::TargetsPerSample() const { return IsLanguageModel() ? gpt.context : 1; }

namespace {

std::string ReplaceSite(std::string pattern, absl::string_view site_id) {
  const std::string kSite = "{site}", id(site_id);
  for (size_t at = pattern.find(kSite); at != std::string::npos;
       at = pattern.find(kSite, at + id.size())) {
    pattern.replace(at, kSite.size(), id);
  }
  return pattern;
}

}  // namespace

std::string TlsSpec::SiteCert(absl::string_view site_id) const {
  return ReplaceSite(site_cert, site_id);
}

std::string TlsSpec::SiteKey(absl::string_view site_id) const {
  return ReplaceSite(site_key, site_id);
}

bool JobSpec::PlansSplit() const {
  return std::any_of(sites.begin(), sites.end(), [](const SiteSpec& s) { return s.plan_layers; });
}

const std::string& JobSpec::SiteIdAt(int slot) const {
  const int stage = slot % Stages(), replica = slot / Stages();
  return replicas.empty() ? sites[stage].id : replicas[replica][stage];
}

std::vector<std::string> JobSpec::StageReplicaIds(int stage) const {
  std::vector<std::string> ids;
  for (int r = 0; r < Replicas(); ++r) ids.push_back(SiteIdAt(r * Stages() + stage));
  return ids;
}

int JobSpec::SiteSlot(absl::string_view id) const {
  for (int slot = 0; slot < SiteSlots(); ++slot) {
    if (SiteIdAt(slot) == id) return slot;
  }
  return -1;
}

const std::string& JobSpec::MemberIdAt(int slot) const {
  const int t = TeacherStageOf(slot);
  return t >= 0 ? teacher.sites[t].id : SiteIdAt(slot);
}

int JobSpec::MemberSlot(absl::string_view id) const {
  for (int slot = 0; slot < MemberSlots(); ++slot) {
    if (MemberIdAt(slot) == id) return slot;
  }
  return -1;
}

int JobSpec::SiteIndex(absl::string_view id) const {
  for (size_t i = 0; i < sites.size(); ++i) {
    if (sites[i].id == id) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<JobSpec> OnePipelineOf(const JobSpec& spec) {
  if (spec.Replicas() == 1) return spec;
  if (spec.training.sync == ReplicaSync::kOuter) {
    return absl::FailedPreconditionError(
        "replicas with sync: outer train apart between outer steps; no single pipeline trains "
        "the same (set sync: every_step for its one-pipeline equivalent)");
  }
  JobSpec one = spec;  // Replica 0's ids are those of `sites`.
  one.training.global_batch *= spec.Replicas();
  one.training.microbatches *= spec.Replicas();
  one.replicas.clear();
  return one;
}

absl::StatusOr<JobSpec> LoadJobSpec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError("cannot open job spec '" + path + "': no such file or not readable");
  }
  std::stringstream text;
  text << in.rdbuf();
  std::string dir = ".";
  if (size_t slash = path.find_last_of('/'); slash != std::string::npos) {
    dir = slash == 0 ? "/" : path.substr(0, slash);
  }
  return ParseJobSpec(text.str(), path, dir);
}

absl::Status RefuseProjectingLinks(const JobSpec& spec, absl::string_view what) {
  for (const LinkSpec& link : spec.links) {
    for (const std::string& chain : {link.forward, link.backward}) {
      absl::StatusOr<compression::ChainSpec> parsed = compression::ParseChainSpec(chain);
      if (!parsed.ok() || compression::FindProject(*parsed) == nullptr) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          what, " cannot run this job: links[", link.boundary, "] projects (", chain,
          "), so the federation trains a model with a rank-limited map at boundary ", link.boundary,
          ", which one process does not build; train and sample it through the "
          "federation (strait demo, strait generate --federation)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace strait
