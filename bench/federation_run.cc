#include "bench/federation_run.h"

#include "harness/subprocess.h"

namespace strait::bench {

nlohmann::json Metrics(const std::string& dir) {
  return nlohmann::json::parse(harness::ReadFile(dir + "/metrics.json"), nullptr,
                               /*allow_exceptions=*/false);
}

std::vector<std::string> SiteIds(const JobSpec& spec) {
  std::vector<std::string> ids;
  for (const SiteSpec& s : spec.sites) ids.push_back(s.id);
  return ids;
}

absl::StatusOr<FederationRun> RunFederation(
    harness::LocalFederation& fed, const JobSpec& spec,
    const std::map<std::string, harness::LinkProfile>& links,
    const std::vector<std::string>& site_cpus, bool evaluate) {
  const std::vector<std::string> ids = SiteIds(spec);
  if (absl::Status s = fed.LimitSiteCpus(site_cpus); !s.ok()) return s;
  std::string error;
  if (!fed.StartGateway({"--log-level", "warn"}, &error)) {
    return absl::InternalError("the gateway did not start:\n" + error);
  }
  for (const auto& [site, profile] : links) {
    if (absl::Status s = fed.EmulateWan(profile, {site}); !s.ok()) return s;
  }
  for (const std::string& id : ids) {
    std::vector<std::string> args = {"--threads", "1"};
    if (!evaluate) args.push_back("--no-eval");
    fed.StartSite(id, args);
  }
  if (absl::Status done = fed.WaitSites(ids, kRunLimit); !done.ok()) return done;
  FederationRun run;
  run.gateway_cpu_seconds = fed.gateway().CpuSeconds();
  run.emulator_cpu_seconds = fed.WanCpuSeconds();
  const size_t boundaries = ids.size() - 1;
  run.forward_frame_bytes.assign(boundaries, 0);
  run.backward_frame_bytes.assign(boundaries, 0);
  for (const std::string& id : ids) {
    nlohmann::json m = Metrics(fed.OutDir(id));
    if (m.is_discarded()) return absl::InternalError("site " + id + " wrote no metrics.json");
    if (id == ids.back()) {
      run.samples_per_second = m.value("samples_per_second", 0.0);
      run.steady_samples_per_second = m.value("steady_samples_per_second", run.samples_per_second);
      run.val_loss = m.value("val_loss", 0.0);
    }
    run.sites.push_back(
        {id, m.value("train_seconds", 0.0), m.value("train_cpu_seconds", 0.0), m["time"]});
    for (const auto& link : m["links"]) {
      // Counted once, by the sender; replicas' sums are not a boundary's.
      if (!link.value("sent", false) || link.value("sum", false)) continue;
      const double wire = link.value("wire_bytes", 0.0), frames = link.value("frames", 0.0);
      run.raw_bytes += link.value("raw_bytes", 0.0);
      run.wire_bytes += wire;
      const bool forward = link.value("direction", "") == "forward";
      (forward ? run.forward_wire_bytes : run.backward_wire_bytes) += wire;
      const size_t b = link.value("boundary", 0);
      if (b >= boundaries || frames <= 0) continue;
      (forward ? run.forward_frame_bytes : run.backward_frame_bytes)[b] = wire / frames;
    }
  }
  return run;
}

}  // namespace strait::bench
