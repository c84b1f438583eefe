#include "bench/relay_job.h"

#include "core/job_spec.h"
#include "core/join_request.h"

namespace strait::bench {

const char kRelayJobSpec[] = R"(name: relay-bench
gateway: {memory_budget: 512MiB}
model: {family: mlp, input: 16, hidden: [262144, 8], classes: 4}
data: {dataset: synthetic}
training: {steps: 1, global_batch: 64, microbatches: 4}
sites:
  - {id: a, layers: [0, 1]}
  - {id: b, layers: [1, 3]}
)";

v1::TensorKey RelayFrameKey(uint64_t i) {
  v1::TensorKey key;
  key.set_job(kRelayFederation);
  key.set_step(i / 4);
  key.set_microbatch(static_cast<uint32_t>(i % 4));
  key.set_boundary(0);
  key.set_direction(v1::FORWARD);
  return key;
}

v1::JoinRequest RelayJoin(const std::string& id) {
  static const JobSpec spec = *ParseJobSpec(kRelayJobSpec, "relay-bench.yaml", "/");
  return JoinRequestFor(spec, spec.SiteIndex(id), UnsignedKey(id, 1));
}

}  // namespace strait::bench
