// Feeds arbitrary bytes to the two decoders of site profiles (plan/site_profile.h): a profiles file
// (JSON, `strait plan --profiles`) and a PlanRequest's profile from the network (FromProto). Both
// must return a Status, never crash; a profile either accepts is planned with
// (plan/split_planner.h) as the gateway would, which must not crash on any numbers it let through
// either. Seeds: tests/fuzz/corpus/site_profile_fuzz/.
#include <cstddef>
#include <cstdint>
#include <string>

#include "plan/site_profile.h"
#include "plan/split_planner.h"

namespace {

// Three sites, layers: auto, over a 4-layer MLP.
const strait::JobSpec& Spec() {
  static const strait::JobSpec spec = *strait::ParseJobSpec(
      "name: f\nmodel: {family: mlp, input: 8, hidden: [8, 8, 8], classes: 2}\n"
      "data: {dataset: synthetic}\ntraining: {steps: 1, global_batch: 8, microbatches: 4,"
      " extra_in_flight: auto}\nsites: [{id: a, layers: auto}, {id: b, layers: auto},"
      " {id: c, layers: [3, 4]}]\n",
      "f.yaml", "/");
  return spec;
}

// Plans with `site` standing for every site of Spec(), as the gateway would once all are in.
void Plan(strait::plan::SiteProfile site) {
  site.model = strait::plan::ProfiledModel(Spec());
  strait::plan::FederationProfile profiles;
  for (const char* id : {"a", "b", "c"}) {
    site.site = id;
    profiles.sites.push_back(site);
    profiles.links.push_back({.site = id,
                              .round_trip_s = site.layers.empty() ? 0 : site.layers[0].forward_s,
                              .bytes_per_second = static_cast<double>(site.memory_bytes)});
  }
  (void)strait::plan::PlanSplit(Spec(), profiles);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    absl::StatusOr<strait::plan::FederationProfile> file =
        strait::plan::ParseFederationProfile(bytes, "fuzz.json");
    if (file.ok() && !file->sites.empty()) Plan(file->sites.front());
  } else {
    strait::v1::MeasuredSite message;
    if (!message.ParseFromString(bytes)) return 0;
    absl::StatusOr<strait::plan::SiteProfile> profile = strait::plan::FromProto(message, "a");
    if (profile.ok()) Plan(*profile);
  }
  return 0;
}
