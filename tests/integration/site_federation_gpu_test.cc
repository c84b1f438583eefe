// A heterogeneous federation (issue #7): the middle site trains on CUDA, its neighbours on CPU, and
// the result matches the all-CPU single process within 1e-4 relative (float reduction order differs
// between cuBLAS and OpenBLAS, so bits may not). Exits 77 (skipped) without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "site/backend/backend_factory.h"
#include "tests/integration/federation_fixture.h"

namespace strait::testing {
namespace {

using std::chrono::seconds;

class CudaEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (auto cuda = site::CreateBackend(DeviceKind::kCuda, {}); !cuda.ok()) {
      std::fprintf(stderr, "skipping: %s\n", std::string(cuda.status().message()).c_str());
      std::exit(77);
    }
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new CudaEnvironment);

constexpr char kJob[] = R"(name: gpu-test
gateway: {memory_budget: 64MiB}
model: {family: mlp, input: 784, hidden: [256, 256, 256], classes: 10, dropout: 0.1, init_seed: 5}
data: {dataset: fashion-mnist, seed: 11}
training: {steps: 20, global_batch: 64, microbatches: 4, grad_clip: 1.0, optimizer: {name: adamw, lr: 0.001}}
sites:
  - {id: dc-a, layers: [0, 1]}
  - {id: dc-b, layers: [1, 3], device: cuda}
  - {id: dc-c, layers: [3, 4]}
links:
  - {between: [dc-a, dc-b], forward: none, backward: none}
  - {between: [dc-b, dc-c], forward: none, backward: none}
)";

TEST(GpuFederationTest, ACudaSiteMatchesTheAllCpuRun) {
  const std::vector<std::string> sites = {"dc-a", "dc-b", "dc-c"};
  BuildTreeFederation fed(kJob, sites);
  std::string error;
  ASSERT_TRUE(fed.StartGateway({}, &error)) << error;
  for (const std::string& id : sites) fed.StartSite(id);
  ASSERT_EQ(fed.WaitSites(sites, seconds(600)), absl::OkStatus());
  ASSERT_EQ(fed.RunReference({"--device", "cpu"}, seconds(600)), 0);
  absl::StatusOr<site::CheckpointState> reference =
      site::ReadCheckpoint(fed.ReferenceDir() + "/final.ckpt");
  ASSERT_TRUE(reference.ok()) << reference.status();
  size_t offset = 0;
  for (const std::string& id : sites) {
    absl::StatusOr<site::CheckpointState> stage =
        site::ReadCheckpoint(fed.OutDir(id) + "/final.ckpt");
    ASSERT_TRUE(stage.ok()) << stage.status();
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < stage->params.size(); ++i) {
      const double want = reference->params[offset + i];
      diff += (stage->params[i] - want) * (stage->params[i] - want);
      norm += want * want;
    }
    EXPECT_LE(std::sqrt(diff / norm), 1e-4) << id;
    offset += stage->params.size();
  }
}

}  // namespace
}  // namespace strait::testing
