#include "core/job_spec.h"

#include <fstream>
#include <sstream>

namespace strait {

const char* ToString(ModelFamily v) { return v == ModelFamily::kMlp ? "mlp" : "vit"; }
const char* ToString(Activation v) { return v == Activation::kRelu ? "relu" : "gelu"; }
const char* ToString(DatasetKind v) {
  return v == DatasetKind::kFashionMnist ? "fashion-mnist" : "synthetic";
}
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
const char* ToString(OptimizerKind v) { return v == OptimizerKind::kSgd ? "sgd" : "adamw"; }
const char* ToString(LrDecay v) { return v == LrDecay::kCosine ? "cosine" : "none"; }
const char* ToString(DeviceKind v) { return v == DeviceKind::kCpu ? "cpu" : "cuda"; }

OptimizerSpec WithDecayHorizon(OptimizerSpec optimizer, int64_t total_steps) {
  if (optimizer.decay_steps == 0) optimizer.decay_steps = total_steps;
  return optimizer;
}

int ModelSpec::NumLayers() const {
  return family == ModelFamily::kMlp ? static_cast<int>(mlp.hidden.size()) + 1 : vit.depth + 2;
}

int ModelSpec::InputFeatures() const {
  return family == ModelFamily::kMlp ? mlp.input : vit.channels * vit.height * vit.width;
}

int ModelSpec::Classes() const { return family == ModelFamily::kMlp ? mlp.classes : vit.classes; }

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

int JobSpec::SiteIndex(absl::string_view id) const {
  for (size_t i = 0; i < sites.size(); ++i) {
    if (sites[i].id == id) return static_cast<int>(i);
  }
  return -1;
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

}  // namespace strait
