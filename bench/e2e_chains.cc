#include "bench/e2e_chains.h"

#include <cstdio>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/federation_run.h"
#include "harness/local_federation.h"

namespace strait::bench {
namespace {

struct ChainSet {
  std::string forward, backward;
};

absl::StatusOr<std::vector<ChainSet>> ParseChainSets(const std::string& text) {
  std::vector<ChainSet> sets;
  for (absl::string_view set : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    std::vector<std::string> parts = absl::StrSplit(set, '/');
    if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--chains: '%s' is not FORWARD/BACKWARD (e.g. int8+zstd/bf16; sets apart by ';')",
          std::string(set)));
    }
    sets.push_back({parts[0], parts[1]});
  }
  if (sets.empty()) return absl::InvalidArgumentError("--chains names no chain set");
  return sets;
}

struct ChainRow {
  ChainSet set;
  FederationRun run;
  double samples = 0;
};

void PrintRows(const std::vector<ChainRow>& rows) {
  std::printf("\n%-44s %9s %8s %12s %12s %9s %10s\n", "forward / backward", "val loss", "vs first",
              "fwd B/sample", "bwd B/sample", "x fp32", "samples/s");
  const double reference = rows.front().run.val_loss;
  for (const ChainRow& r : rows) {
    const FederationRun& x = r.run;
    std::printf("%-44s %9.4f %+7.2f%% %12.0f %12.0f %8.1fx %10.1f\n",
                (r.set.forward + " / " + r.set.backward).c_str(), x.val_loss,
                reference > 0 ? 100 * (x.val_loss / reference - 1) : 0.0,
                x.forward_wire_bytes / r.samples, x.backward_wire_bytes / r.samples,
                x.raw_bytes / std::max(x.wire_bytes, 1.0), x.steady_samples_per_second);
  }
  std::printf(
      "\nval loss: the held-out split's after the last step (nats/token for a language model); "
      "B/sample: wire bytes across every boundary per trained sample, each direction; x fp32: "
      "the same tensors as raw fp32 over the wire bytes, both directions; samples/s: the last "
      "stage's steady state.\n");
}

}  // namespace

int RunChains(const ChainsOptions& o) {
  absl::StatusOr<std::vector<ChainSet>> sets = ParseChainSets(o.chains);
  if (!sets.ok()) {
    std::fprintf(stderr, "strait bench e2e: %s\n", std::string(sets.status().message()).c_str());
    return 2;
  }
  std::vector<ChainRow> rows;
  for (const ChainSet& set : *sets) {
    harness::JobSpecOverrides overrides = o.overrides;
    overrides.codec.clear();
    overrides.forward_codec = set.forward;
    overrides.backward_codec = set.backward;
    absl::StatusOr<harness::RewrittenJobSpec> job = harness::RewriteJobSpec(o.config, overrides);
    if (!job.ok()) {
      std::fprintf(stderr, "strait bench e2e: %s\n", std::string(job.status().message()).c_str());
      return 2;
    }
    std::printf("training %s / %s%s ...\n", set.forward.c_str(), set.backward.c_str(),
                o.link ? (" behind " + harness::Describe(*o.link)).c_str() : " on loopback");
    std::fflush(stdout);
    const std::vector<std::string> ids = SiteIds(job->spec);
    harness::LocalFederation fed(job->yaml, ids);
    std::map<std::string, harness::LinkProfile> links;
    if (o.link) {
      for (const std::string& id : ids) links.emplace(id, *o.link);
    }
    absl::StatusOr<FederationRun> run =
        RunFederation(fed, job->spec, links, o.site_cpus, /*evaluate=*/true);
    if (!run.ok()) {
      std::fprintf(stderr, "strait bench e2e: %s / %s: %s\n", set.forward.c_str(),
                   set.backward.c_str(), std::string(run.status().message()).c_str());
      return 1;
    }
    rows.push_back(
        {set, *run,
         static_cast<double>(job->spec.training.steps) * job->spec.training.global_batch});
  }
  PrintRows(rows);
  return 0;
}

}  // namespace strait::bench
