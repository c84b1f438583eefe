// The CPU all-reducer against a plain sum in replica order (same bits), over several rounds,
// replica counts and bucket shapes (empty, unaligned, larger than the reduction's chunk).
#include "site/collective/all_reducer.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "site/backend/counter_rng.h"

namespace strait::site {
namespace {

float Value(int round, int replica, int64_t i) {
  return 2 * CounterUniform(CombineKey(round, replica), i) - 1;
}

void ExpectPlainSum(int replicas) {
  const std::vector<int64_t> sizes = {17, 0, 1, 5000, 33, 2048, 4099};
  std::vector<Bucket> buckets;
  int64_t total = 3;  // a gap before the first bucket stays untouched
  for (int64_t n : sizes) {
    buckets.push_back({total, n});
    total += n;
  }
  std::vector<std::vector<float>> buffers(replicas, std::vector<float>(total, 0.0f));
  std::vector<float*> pointers;
  for (auto& b : buffers) pointers.push_back(b.data());
  auto reducer = CreateCpuAllReducer(pointers, buckets);
  ASSERT_TRUE(reducer.ok()) << reducer.status();

  constexpr int kRounds = 4;
  std::vector<std::vector<float>> expected(kRounds, std::vector<float>(total, 0.0f));
  for (int r = 0; r < kRounds; ++r) {
    for (int64_t i = 3; i < total; ++i) {
      float sum = Value(r, 0, i);
      for (int w = 1; w < replicas; ++w) sum += Value(r, w, i);
      expected[r][i] = sum;
    }
  }
  std::vector<int> mismatches(replicas, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < replicas; ++w) {
    threads.emplace_back([&, w] {
      for (int r = 0; r < kRounds; ++r) {
        for (int64_t i = 3; i < total; ++i) buffers[w][i] = Value(r, w, i);
        for (int b = 0; b < static_cast<int>(buckets.size()); ++b) (*reducer)->Ready(w, b);
        if (!(*reducer)->Finish(w).ok()) ++mismatches[w];
        if (buffers[w] != expected[r]) ++mismatches[w];
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < replicas; ++w) EXPECT_EQ(mismatches[w], 0) << "replica " << w;
}

TEST(CpuAllReducerTest, OneReplicaIsIdentity) { ExpectPlainSum(1); }
TEST(CpuAllReducerTest, TwoReplicas) { ExpectPlainSum(2); }
TEST(CpuAllReducerTest, ThreeReplicas) { ExpectPlainSum(3); }
TEST(CpuAllReducerTest, FiveReplicas) { ExpectPlainSum(5); }

TEST(CpuAllReducerTest, RejectsBadArguments) {
  EXPECT_FALSE(CreateCpuAllReducer({}, {}).ok());
  float x[4];
  EXPECT_FALSE(CreateCpuAllReducer({x}, {{-1, 2}}).ok());
}

TEST(NcclAllReducerTest, RefusesNonCudaBackends) {
  // Without CUDA: FailedPrecondition; with CUDA: no CUDA backend given.
  EXPECT_FALSE(CreateNcclAllReducer({}, {}, {}, {}).ok());
}

}  // namespace
}  // namespace strait::site
