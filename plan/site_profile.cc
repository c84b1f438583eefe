#include "plan/site_profile.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/model_layout.h"
#include "core/run_report.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace strait::plan {
namespace {

using nlohmann::json;

// Reads fields of one JSON object, naming the entry (`where`) in every error.
class Fields {
 public:
  Fields(const json& object, std::string where) : object_(object), where_(std::move(where)) {}

  absl::Status Number(const char* key, double* out) const {
    const json* v = Find(key);
    if (v == nullptr || !v->is_number() || !(v->get<double>() >= 0) || v->get<double>() > 1e15) {
      return Bad(key, "a number >= 0");
    }
    *out = v->get<double>();
    return absl::OkStatus();
  }
  absl::Status Bytes(const char* key, int64_t* out) const {
    const json* v = Find(key);
    if (v == nullptr || !v->is_number_integer() || v->get<int64_t>() < 0 ||
        v->get<int64_t>() > (int64_t{1} << 50)) {
      return Bad(key, "a whole number of bytes >= 0");
    }
    *out = v->get<int64_t>();
    return absl::OkStatus();
  }
  absl::Status Text(const char* key, std::string* out, bool required) const {
    const json* v = Find(key);
    if (v == nullptr && !required) return absl::OkStatus();
    if (v == nullptr || !v->is_string()) return Bad(key, "a string");
    *out = v->get<std::string>();
    return absl::OkStatus();
  }
  absl::StatusOr<const json*> List(const char* key) const {
    const json* v = Find(key);
    if (v == nullptr || !v->is_array()) return Bad(key, "a list");
    return v;
  }

 private:
  const json* Find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  absl::Status Bad(const char* key, const char* expected) const {
    return absl::InvalidArgumentError(
        absl::StrCat(where_, ".", key, ": expected ", expected,
                     Find(key) == nullptr ? ", found nothing" : ", found " + Find(key)->dump()));
  }

  const json& object_;
  std::string where_;
};

absl::StatusOr<SiteProfile> ParseSite(const json& object, const std::string& where) {
  if (!object.is_object()) return absl::InvalidArgumentError(where + ": expected an object");
  const Fields f(object, where);
  SiteProfile site;
  STRAIT_RETURN_IF_ERROR(f.Text("site", &site.site, /*required=*/true));
  STRAIT_RETURN_IF_ERROR(f.Text("model", &site.model, /*required=*/true));
  STRAIT_RETURN_IF_ERROR(f.Text("device", &site.device, /*required=*/false));
  STRAIT_RETURN_IF_ERROR(f.Bytes("memory_bytes", &site.memory_bytes));
  STRAIT_ASSIGN_OR_RETURN(const json* layers, f.List("layers"));
  for (size_t k = 0; k < layers->size(); ++k) {
    const json& entry = (*layers)[k];
    const std::string at = absl::StrCat(where, ".layers[", k, "]");
    if (!entry.is_object()) return absl::InvalidArgumentError(at + ": expected an object");
    const Fields l(entry, at);
    LayerProfile p;
    int64_t layer = 0;
    STRAIT_RETURN_IF_ERROR(l.Bytes("layer", &layer));
    if (layer != static_cast<int64_t>(k)) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".layer: expected ", k, " (layers in order from 0), found ", layer));
    }
    p.layer = static_cast<int>(layer);
    STRAIT_RETURN_IF_ERROR(l.Number("forward_s", &p.forward_s));
    STRAIT_RETURN_IF_ERROR(l.Number("backward_s", &p.backward_s));
    STRAIT_RETURN_IF_ERROR(l.Number("update_s", &p.update_s));
    for (double t : {p.forward_s, p.backward_s, p.update_s}) {
      if (t > 1e6) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ": a time of ", t, " s; expected at most 1e6 s"));
      }
    }
    STRAIT_RETURN_IF_ERROR(l.Bytes("param_bytes", &p.param_bytes));
    STRAIT_RETURN_IF_ERROR(l.Bytes("optimizer_bytes", &p.optimizer_bytes));
    STRAIT_RETURN_IF_ERROR(l.Bytes("microbatch_bytes", &p.microbatch_bytes));
    site.layers.push_back(p);
  }
  return site;
}

absl::StatusOr<MeasuredLink> ParseLink(const json& object, const std::string& where) {
  if (!object.is_object()) return absl::InvalidArgumentError(where + ": expected an object");
  const Fields f(object, where);
  MeasuredLink link;
  STRAIT_RETURN_IF_ERROR(f.Text("site", &link.site, /*required=*/true));
  STRAIT_RETURN_IF_ERROR(f.Number("round_trip_s", &link.round_trip_s));
  STRAIT_RETURN_IF_ERROR(f.Number("bytes_per_second", &link.bytes_per_second));
  if (absl::Status s = CheckMeasuredLink(link); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
  }
  return link;
}

// FNV-1a: a short, stable digest of the layout text (not a security property).
uint32_t Digest(const std::string& text) {
  uint32_t h = 2166136261u;
  for (unsigned char c : text) h = (h ^ c) * 16777619u;
  return h;
}

}  // namespace

absl::Status CheckMeasuredLink(const MeasuredLink& link) {
  if (!std::isfinite(link.round_trip_s) || link.round_trip_s < 0 || link.round_trip_s > 1000) {
    return absl::InvalidArgumentError(absl::StrCat("the link of site '", link.site,
                                                   "' has a round trip of ", link.round_trip_s,
                                                   " s; expected 0 to 1000 s"));
  }
  const double rate = link.bytes_per_second;
  if (!std::isfinite(rate) || (rate != 0 && (rate < 1 || rate > 1e15))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the link of site '", link.site, "' has a rate of ", rate,
                     " bytes/s; expected 0 (not limited) or 1 to 1e15"));
  }
  return absl::OkStatus();
}

const SiteProfile* FederationProfile::Site(const std::string& id) const {
  for (const SiteProfile& s : sites) {
    if (s.site == id) return &s;
  }
  return nullptr;
}

const MeasuredLink* FederationProfile::Link(const std::string& id) const {
  for (const MeasuredLink& l : links) {
    if (l.site == id) return &l;
  }
  return nullptr;
}

std::string ProfiledModel(const JobSpec& spec) {
  std::string layout;
  int64_t params = 0;
  const std::vector<LayerLayout> layers = BuildModelLayout(spec.model);
  for (const LayerLayout& l : layers) {
    absl::StrAppend(&layout, l.name, ShapeToString(l.in_shape), ShapeToString(l.out_shape),
                    l.param_count, ";");
    params += l.param_count;
  }
  const std::string optimizer = ToString(spec.training.optimizer.kind);
  const std::string precision = ToString(spec.training.precision);
  absl::StrAppend(&layout, spec.training.MicrobatchSize(), optimizer, precision);
  return absl::StrFormat("%s %d layers %d params mb %d %s %s #%08x", ToString(spec.model.family),
                         layers.size(), params, spec.training.MicrobatchSize(), optimizer,
                         precision, Digest(layout));
}

std::string FederationProfileToJson(const FederationProfile& profile) {
  json out = {{"sites", json::array()}, {"links", json::array()}};
  for (const SiteProfile& s : profile.sites) {
    json layers = json::array();
    for (const LayerProfile& p : s.layers) {
      layers.push_back({{"layer", p.layer},
                        {"forward_s", p.forward_s},
                        {"backward_s", p.backward_s},
                        {"update_s", p.update_s},
                        {"param_bytes", p.param_bytes},
                        {"optimizer_bytes", p.optimizer_bytes},
                        {"microbatch_bytes", p.microbatch_bytes}});
    }
    out["sites"].push_back({{"site", s.site},
                            {"model", s.model},
                            {"device", s.device},
                            {"memory_bytes", s.memory_bytes},
                            {"layers", std::move(layers)}});
  }
  for (const MeasuredLink& l : profile.links) {
    out["links"].push_back({{"site", l.site},
                            {"round_trip_s", l.round_trip_s},
                            {"bytes_per_second", l.bytes_per_second}});
  }
  return out.dump(1) + "\n";
}

absl::StatusOr<FederationProfile> ParseFederationProfile(const std::string& text,
                                                         const std::string& source) {
  const json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(source + ": not a JSON object of profiles (sites, links)");
  }
  FederationProfile profile;
  for (const char* key : {"sites", "links"}) {
    auto it = root.find(key);
    if (it == root.end()) continue;
    if (!it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", key, " must be a list"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const std::string where = absl::StrCat(source, ": ", key, "[", i, "]");
      if (std::string(key) == "sites") {
        STRAIT_ASSIGN_OR_RETURN(SiteProfile site, ParseSite((*it)[i], where));
        profile.sites.push_back(std::move(site));
      } else {
        STRAIT_ASSIGN_OR_RETURN(MeasuredLink link, ParseLink((*it)[i], where));
        profile.links.push_back(std::move(link));
      }
    }
  }
  return profile;
}

absl::StatusOr<FederationProfile> ReadFederationProfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read profiles ", path));
  std::stringstream text;
  text << in.rdbuf();
  return ParseFederationProfile(text.str(), path);
}

absl::Status WriteFederationProfile(const FederationProfile& profile, const std::string& path) {
  return WriteJsonFile(path, json::parse(FederationProfileToJson(profile)));
}

v1::MeasuredSite ToProto(const SiteProfile& profile) {
  v1::MeasuredSite m;
  m.set_model(profile.model);
  m.set_device(profile.device);
  m.set_memory_bytes(profile.memory_bytes);
  for (const LayerProfile& p : profile.layers) {
    v1::MeasuredLayer* l = m.add_layers();
    l->set_forward_s(p.forward_s);
    l->set_backward_s(p.backward_s);
    l->set_update_s(p.update_s);
    l->set_param_bytes(p.param_bytes);
    l->set_optimizer_bytes(p.optimizer_bytes);
    l->set_microbatch_bytes(p.microbatch_bytes);
  }
  return m;
}

absl::StatusOr<SiteProfile> FromProto(const v1::MeasuredSite& m, const std::string& site) {
  constexpr int kMaxLayers = 1 << 20;
  constexpr uint64_t kMaxBytes = uint64_t{1} << 50;  // A petabyte: beyond, a number is garbage.
  if (m.layers_size() > kMaxLayers || m.memory_bytes() > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the profile of site '", site, "' has ",
                                                   m.layers_size(), " layers and ",
                                                   m.memory_bytes(), " bytes of memory"));
  }
  SiteProfile profile{.site = site,
                      .model = m.model(),
                      .device = m.device(),
                      .memory_bytes = static_cast<int64_t>(m.memory_bytes())};
  for (int k = 0; k < m.layers_size(); ++k) {
    const v1::MeasuredLayer& l = m.layers(k);
    for (double t : {l.forward_s(), l.backward_s(), l.update_s()}) {
      if (!std::isfinite(t) || t < 0 || t > 1e6) {
        return absl::InvalidArgumentError(absl::StrCat("the profile of site '", site,
                                                       "' gives layer ", k, " a time of ", t,
                                                       " s; expected a number of seconds >= 0"));
      }
    }
    for (uint64_t b : {l.param_bytes(), l.optimizer_bytes(), l.microbatch_bytes()}) {
      if (b > kMaxBytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("the profile of site '", site, "' gives layer ", k, " ", b, " bytes"));
      }
    }
    profile.layers.push_back({.layer = k,
                              .forward_s = l.forward_s(),
                              .backward_s = l.backward_s(),
                              .update_s = l.update_s(),
                              .param_bytes = static_cast<int64_t>(l.param_bytes()),
                              .optimizer_bytes = static_cast<int64_t>(l.optimizer_bytes()),
                              .microbatch_bytes = static_cast<int64_t>(l.microbatch_bytes())});
  }
  return profile;
}

void MergeFederationProfile(const FederationProfile& from, FederationProfile* into) {
  for (const SiteProfile& s : from.sites) {
    std::erase_if(into->sites, [&](const SiteProfile& o) { return o.site == s.site; });
    into->sites.push_back(s);
  }
  for (const MeasuredLink& l : from.links) {
    std::erase_if(into->links, [&](const MeasuredLink& o) { return o.site == l.site; });
    into->links.push_back(l);
  }
}

double ComputeSecondsPerStep(const SiteProfile& profile, int microbatches) {
  double seconds = 0;
  for (const LayerProfile& l : profile.layers) {
    seconds += microbatches * (l.forward_s + l.backward_s) + l.update_s;
  }
  return seconds;
}

}  // namespace strait::plan
