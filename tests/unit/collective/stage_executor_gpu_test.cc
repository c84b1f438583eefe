// StageExecutors on CUDA devices against the CPU (gpu label): a 1-worker CUDA executor (one GPU)
// against a CPU Stage, NCCL's all-reduce of one rank, and, with two or more devices, a 2-worker
// CUDA executor (NCCL all-reduce) against a 2-worker CPU executor. Exits with 77 (skipped) in a
// build without CUDA or on a machine without a CUDA device.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
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

TEST(StageExecutorGpuTest, NcclAllReduceOfOneRankIsIdentity) {
  auto backend = CreateBackend(DeviceKind::kCuda, {1, 0});
  ASSERT_TRUE(backend.ok()) << backend.status();
  auto buffer = DeviceBuffer::Create(backend->get(), sizeof(float) * 1000);
  ASSERT_TRUE(buffer.ok());
  std::vector<float> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.5f * static_cast<float>(i) - 7.0f;
  (*backend)->CopyToDevice(buffer->f32(), host.data(), sizeof(float) * host.size());
  auto reducer =
      site::CreateNcclAllReducer({backend->get()}, {0}, {buffer->f32()}, {{0, 600}, {600, 400}});
  ASSERT_TRUE(reducer.ok()) << reducer.status();
  (*reducer)->Ready(0, 0);
  (*reducer)->Ready(0, 1);
  ASSERT_TRUE((*reducer)->Finish(0).ok());
  std::vector<float> back(host.size());
  (*backend)->CopyToHost(back.data(), buffer->f32(), sizeof(float) * back.size());
  ASSERT_TRUE((*backend)->Sync().ok());
  EXPECT_EQ(back, host);
}

TEST(StageExecutorGpuTest, TwoCudaWorkersMatchTwoCpuWorkers) {
  if (CudaDevices() < 2) GTEST_SKIP() << "needs two CUDA devices";
  ExpectClose(Mlp(), {2, 2}, {2, 2});
  ExpectClose(Vit(), {2, 1}, {2, 1});
}

}  // namespace
}  // namespace strait::site
