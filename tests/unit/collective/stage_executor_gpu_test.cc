// StageExecutors on CUDA devices against the CPU (gpu label): a 1-worker CUDA executor (one GPU)
// against a CPU Stage, NCCL's all-reduce of one rank, and, with two or more devices, a 2-worker
// CUDA executor (NCCL all-reduce) against a 2-worker CPU executor. Exits with 77 (skipped) in a
// build without CUDA or on a machine without a CUDA device.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "site/backend/backend_factory.h"
#include "site/collective/all_reducer.h"
#include "site/pipeline/stage_executor.h"
#include "tests/unit/collective/test_pipeline.h"

namespace strait::site {
namespace {

using namespace ::strait::site::harness;  // NOLINT: the shared harness

// CUDA devices that a backend can be made on (0, 1, ... until the first that cannot).
int CudaDevices() {
  int n = 0;
  while (n < 16 && CreateBackend(DeviceKind::kCuda, {1, n}).ok()) ++n;
  return n;
}

class CudaEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (CudaDevices() == 0) {
      auto b = CreateBackend(DeviceKind::kCuda, {1, 0});
      std::fprintf(stderr, "skipping: %s\n", std::string(b.status().message()).c_str());
      std::exit(77);
    }
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new CudaEnvironment);

// GPU against CPU: cuBLAS and the kernels sum in other orders than OpenBLAS and the CPU loops.
constexpr double kTolerance = 1e-4;

void ExpectClose(const ModelSpec& model, const std::vector<int>& workers,
                 const std::vector<int>& reference_workers) {
  const std::vector<LayerRange> ranges = {{0, 2}, {2, 5}};
  Pipeline cuda = Make(model, ranges, workers, OptimizerKind::kSgd, DeviceKind::kCuda, 1);
  Pipeline cpu = Make(model, ranges, reference_workers, OptimizerKind::kSgd, DeviceKind::kCpu, 1);
  for (int64_t step = 0; step < 3; ++step) {
    StepOutcome a = RunStep(cpu, step, {6, 5}), b = RunStep(cuda, step, {6, 5});
    EXPECT_LT(RelativeDifference(b.outputs, a.outputs), kTolerance) << "step " << step;
    EXPECT_LT(RelativeDifference(b.params, a.params), kTolerance) << "step " << step;
    EXPECT_NEAR(b.loss, a.loss, kTolerance * a.loss) << "step " << step;
  }
}

TEST(StageExecutorGpuTest, OneCudaWorkerMatchesCpuStage) {
  ExpectClose(Mlp(), {1, 1}, {0, 0});
  ExpectClose(Vit(), {1, 1}, {0, 0});
}

// One replica on `device` holding `host` (1000 floats), reduced in two buckets, as NCCL rank
// `clique`->first_rank of its clique (or a clique of its own): the buffer afterwards.
std::vector<float> ReduceOnDevice(int device, const std::vector<float>& host,
                                  const site::NcclClique* clique) {
  auto backend = CreateBackend(DeviceKind::kCuda, {1, device});
  EXPECT_TRUE(backend.ok()) << backend.status();
  auto buffer = DeviceBuffer::Create(backend->get(), sizeof(float) * host.size());
  EXPECT_TRUE(buffer.ok());
  (*backend)->CopyToDevice(buffer->f32(), host.data(), sizeof(float) * host.size());
  auto reducer = site::CreateNcclAllReducer({backend->get()}, {device}, {buffer->f32()},
                                            {{0, 600}, {600, 400}}, clique);
  EXPECT_TRUE(reducer.ok()) << reducer.status();
  if (!reducer.ok()) return {};
  (*reducer)->Ready(0, 0);
  (*reducer)->Ready(0, 1);
  EXPECT_TRUE((*reducer)->Finish(0).ok());
  std::vector<float> back(host.size());
  (*backend)->CopyToHost(back.data(), buffer->f32(), sizeof(float) * back.size());
  EXPECT_TRUE((*backend)->Sync().ok());
  return back;
}

std::vector<float> Ramp(float scale) {
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = scale * static_cast<float>(i) - 7.0f;
  return host;
}

TEST(StageExecutorGpuTest, NcclAllReduceOfOneRankIsIdentity) {
  EXPECT_EQ(ReduceOnDevice(0, Ramp(0.5f), nullptr), Ramp(0.5f));
}

// The path of a CUDA site of several machines (site/daemon/site_session.cc NcclAcrossRanks): a
// clique joined through a unique id with ncclCommInitRank, here of one rank.
TEST(StageExecutorGpuTest, NcclCliqueOfOneRankThroughAUniqueIdIsIdentity) {
  absl::StatusOr<std::string> id = site::NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  const site::NcclClique clique{*id, 1, 0};
  EXPECT_EQ(ReduceOnDevice(0, Ramp(0.5f), &clique), Ramp(0.5f));
  const site::NcclClique wrong{"short", 1, 0};
  auto backend = CreateBackend(DeviceKind::kCuda, {1, 0});
  ASSERT_TRUE(backend.ok());
  EXPECT_EQ(
      site::CreateNcclAllReducer({backend->get()}, {0}, {nullptr}, {}, &wrong).status().code(),
      absl::StatusCode::kInvalidArgument);
}

// Two ranks of one device each (threads standing in for the processes): NCCL sums across them.
TEST(StageExecutorGpuTest, TwoRanksOfOneDeviceEachSumThroughANcclClique) {
  if (CudaDevices() < 2) {
    GTEST_SKIP() << "needs two CUDA devices: two ranks of one device each (the unique-id path "
                    "itself runs in NcclCliqueOfOneRankThroughAUniqueIdIsIdentity)";
  }
  absl::StatusOr<std::string> id = site::NewNcclUniqueId();
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<float> sums[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      const site::NcclClique clique{*id, 2, r};
      sums[r] = ReduceOnDevice(r, Ramp(r == 0 ? 0.5f : 0.25f), &clique);
    });
  }
  for (std::thread& t : ranks) t.join();
  std::vector<float> want(1000);
  for (size_t i = 0; i < want.size(); ++i) want[i] = Ramp(0.5f)[i] + Ramp(0.25f)[i];
  EXPECT_EQ(sums[0], want);
  EXPECT_EQ(sums[1], want);
}

TEST(StageExecutorGpuTest, TwoCudaWorkersMatchTwoCpuWorkers) {
  if (CudaDevices() < 2) GTEST_SKIP() << "needs two CUDA devices";
  ExpectClose(Mlp(), {2, 2}, {2, 2});
  ExpectClose(Vit(), {2, 1}, {2, 1});
}

}  // namespace
}  // namespace strait::site
