#include "site/nn/model_import.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/env.h"
#include "core/hf_names.h"
#include "core/status.h"
#include "core/tied_embeddings.h"
#include "site/nn/safetensors.h"

namespace strait::site {
namespace {

// config.json against the job's model: the architecture, and what the tensors' shapes cannot
// tell (how the width splits into heads, the rotary base, the norm's epsilon).
absl::Status CheckConfig(const ModelSpec& model, const std::string& path) {
  STRAIT_ASSIGN_OR_RETURN(const std::string text, Env::Default()->ReadFile(path));
  const nlohmann::json config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) return absl::DataLossError(absl::StrCat(path, " is not a JSON object"));
  const bool llama = model.family == ModelFamily::kLlama;
  const GptSpec& g = model.gpt;
  const std::string type = config.value("model_type", "");
  if (type != (llama ? "llama" : "gpt2")) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": model_type '", type, "', but the job's model.family ",
                     ToString(model.family), " reads '", llama ? "llama" : "gpt2", "'"));
  }
  auto expect = [&](const char* key, double want, const char* job_key) -> absl::Status {
    const auto it = config.find(key);
    if (it == config.end() || !it->is_number()) {
      return absl::FailedPreconditionError(absl::StrCat(path, " lacks the number ", key));
    }
    const double got = it->get<double>();
    if (std::abs(got - want) > 1e-6 * std::abs(want)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": ", key, " is ", got, " but the job spec's model.", job_key, " is ",
                       want, "; set model.", job_key, ": ", got));
    }
    return absl::OkStatus();
  };
  if (!llama) return expect("n_head", g.heads, "heads");
  STRAIT_RETURN_IF_ERROR(expect("num_attention_heads", g.heads, "heads"));
  const double kv = config.value("num_key_value_heads", static_cast<double>(g.heads));
  if (kv != g.KeyValueHeads())
    STRAIT_RETURN_IF_ERROR(expect("num_key_value_heads", g.KeyValueHeads(), "kv_heads"));
  STRAIT_RETURN_IF_ERROR(expect("rope_theta", g.rope_theta, "rope_theta"));
  STRAIT_RETURN_IF_ERROR(expect("rms_norm_eps", g.norm_eps, "norm_eps"));
  const auto scaling = config.find("rope_scaling");
  if (scaling != config.end() && !scaling->is_null()) {
    return absl::UnimplementedError(
        absl::StrCat(path, " scales its rotary positions (rope_scaling); Strait's do not scale"));
  }
  return absl::OkStatus();
}

// A safetensors file read tensor by tensor.
class TensorFile {
 public:
  static absl::StatusOr<TensorFile> Open(const std::string& path) {
    TensorFile f;
    f.path_ = path;
    f.in_.open(path, std::ios::binary | std::ios::ate);
    if (!f.in_) return absl::NotFoundError(absl::StrCat("cannot read ", path));
    const uint64_t size = static_cast<uint64_t>(f.in_.tellg());
    std::string prefix(std::min<uint64_t>(size, 8), '\0');
    f.in_.seekg(0);
    f.in_.read(prefix.data(), static_cast<std::streamsize>(prefix.size()));
    if (prefix.size() == 8) {
      const uint64_t n = SafetensorsHeaderLength(prefix);
      if (n <= kMaxSafetensorsHeaderBytes && n <= size - 8) {
        prefix.resize(8 + n);
        f.in_.read(prefix.data() + 8, static_cast<std::streamsize>(n));
      }
    }
    absl::StatusOr<SafetensorsHeader> header = ParseSafetensorsHeader(prefix, size);
    if (!header.ok()) return Named(path, header.status());
    f.header_ = *std::move(header);
    return f;
  }

  // The values of tensor `name`, checked against `shape`.
  absl::StatusOr<std::vector<float>> Read(const std::string& name,
                                          const std::vector<int64_t>& shape) {
    const auto it = header_.tensors.find(name);
    if (it == header_.tensors.end()) {
      return absl::NotFoundError(absl::StrCat(path_, " has no tensor ", name));
    }
    const SafetensorsEntry& e = it->second;
    if (e.shape != shape) {
      return absl::FailedPreconditionError(
          absl::StrCat(path_, ": tensor ", name, " is ", ShapeToString(e.shape),
                       "; the job's model needs ", ShapeToString(shape)));
    }
    std::string bytes(e.end - e.begin, '\0');
    in_.seekg(static_cast<std::streamoff>(header_.data_start + e.begin));
    in_.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!in_) return absl::DataLossError(absl::StrCat(path_, ": cannot read tensor ", name));
    absl::StatusOr<std::vector<float>> values = DecodeSafetensorsTensor(e, bytes);
    if (!values.ok()) return Named(path_, values.status());
    return values;
  }

 private:
  static absl::Status Named(const std::string& path, const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  }

  std::string path_;
  std::ifstream in_;
  SafetensorsHeader header_;
};

}  // namespace

absl::StatusOr<std::vector<float>> ImportLayers(const ModelSpec& model, LayerRange range,
                                                const std::string& dir) {
  STRAIT_RETURN_IF_ERROR(CheckConfig(model, dir + "/config.json"));
  STRAIT_ASSIGN_OR_RETURN(const std::vector<HfTensor> names, HfNames(model));
  STRAIT_ASSIGN_OR_RETURN(TensorFile file, TensorFile::Open(dir + "/model.safetensors"));
  const std::vector<LayerLayout> layout = BuildModelLayout(model);
  const std::optional<TiedMatrix> tied = TiedMatrixOf(model);
  std::vector<float> params;
  for (int layer = range.start; layer < range.end; ++layer) {
    for (size_t p = 0; p < layout[layer].params.size(); ++p) {
      // The tensor this parameter comes from (with tied embeddings, the head's is the embedding).
      const bool tied_head =
          tied && layer == tied->head_layer && static_cast<int>(p) == tied->head_param;
      const int from_layer = tied_head ? tied->embed_layer : layer;
      const int from_param = tied_head ? tied->embed_param : static_cast<int>(p);
      const HfTensor* t = nullptr;
      for (const HfTensor& n : names) {
        if (n.layer == from_layer && n.param == from_param) t = &n;
      }
      if (t == nullptr) return absl::InternalError("a parameter without a Hugging Face name");
      STRAIT_ASSIGN_OR_RETURN(const std::vector<float> values, file.Read(t->name, t->shape));
      const size_t at = params.size();
      params.resize(at + values.size());
      FromHfLayout(*t, values.data(), params.data() + at);
    }
  }
  return params;
}

}  // namespace strait::site
