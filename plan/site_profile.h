// What the split planner (plan/split_planner.h) knows of a federation: each site's measured cost
// of every layer of the job's model (site/plan/layer_profile.h measures it), and each site's link
// to the gateway. Profiles travel with a site's join and live in files for `strait plan`
// (JSON, below), so a plan can be made offline and a rejoin need not measure again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/job_spec.h"
#include "strait/v1/gateway.pb.h"

namespace strait::plan {

// One layer on one site, at the job's microbatch size, on the site's devices and workers.
struct LayerProfile {
  int layer = 0;
  double forward_s = 0;   // One microbatch, the loss included on the model's last layer.
  double backward_s = 0;  // One microbatch.
  double update_s = 0;    // The optimizer's step over the layer's parameters, once per step.
  int64_t param_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t microbatch_bytes = 0;  // Activations and saved tensors of one microbatch in flight.
};

struct SiteProfile {
  std::string site;
  std::string model;   // ProfiledModel of the job it was measured for.
  std::string device;  // What measured it, e.g. "cpu x 2 workers" (for people; not checked).
  // Memory the site's stage may use, bytes (0: not limited).
  int64_t memory_bytes = 0;
  std::vector<LayerProfile> layers;  // Every layer of the model, in order.
};

// A site's link to the gateway, as the gateway measured it with probe frames.
struct MeasuredLink {
  std::string site;
  double round_trip_s = 0;
  double bytes_per_second = 0;  // 0: not limited.
};

// OK when `link`'s figures are ones a link can have: a finite round trip of at most 1000 s, a
// rate of 0 (not limited) or 1 byte/s to 1e15; the error names the site and the figure.
absl::Status CheckMeasuredLink(const MeasuredLink& link);

struct FederationProfile {
  std::vector<SiteProfile> sites;
  std::vector<MeasuredLink> links;
  const SiteProfile* Site(const std::string& id) const;  // nullptr when absent.
  const MeasuredLink* Link(const std::string& id) const;
};

// Names what a profile depends on: the model's layers (names, shapes, parameters), the microbatch
// size and the optimizer, e.g. "mlp 4 layers 235146 params mb 32 adamw #1a2b3c4d". A profile whose
// text differs was measured for another job and does not count.
std::string ProfiledModel(const JobSpec& spec);

// JSON: {"sites": [{"site", "model", "device", "memory_bytes", "layers": [{"layer", "forward_s",
// "backward_s", "update_s", "param_bytes", "optimizer_bytes", "microbatch_bytes"}]}],
// "links": [{"site", "round_trip_s", "bytes_per_second"}]}. Parse checks every field's type and
// range and says which entry is wrong.
std::string FederationProfileToJson(const FederationProfile& profile);
absl::StatusOr<FederationProfile> ParseFederationProfile(const std::string& json,
                                                         const std::string& source);
absl::StatusOr<FederationProfile> ReadFederationProfile(const std::string& path);
absl::Status WriteFederationProfile(const FederationProfile& profile, const std::string& path);

// The profile as a PlanRequest carries it, and back: FromProto checks every value (times finite
// and >= 0, at most 1 << 20 layers), since it comes from the network.
v1::MeasuredSite ToProto(const SiteProfile& profile);
absl::StatusOr<SiteProfile> FromProto(const v1::MeasuredSite& message, const std::string& site);

// `into` with `from`'s sites and links added; an entry of the same site replaces the old one.
void MergeFederationProfile(const FederationProfile& from, FederationProfile* into);

// A site's compute per step of `microbatches` microbatches over the whole model: every layer's
// forward and backward per microbatch, and its update once. What a re-plan compares.
double ComputeSecondsPerStep(const SiteProfile& profile, int microbatches);

}  // namespace strait::plan
