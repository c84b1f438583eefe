// Encode and decode allocate nothing once their buffers have grown (steady state).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "compression/codec_chain.h"
#include "tests/unit/compression/test_tensors.h"

namespace {
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(size_t size) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// The replacement operator new above allocates with malloc, so free is the matching release; GCC
// cannot see that pairing.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace strait::compression {
namespace {

TEST(AllocationTest, SteadyStateEncodeAndDecodeDoNotAllocate) {
  std::vector<float> v = testing::Relu(100000, 1);
  const std::vector<uint64_t> flat = {v.size()}, rows = {400, 250};  // proj needs rows
  for (const char* spec :
       {"none", "fp16", "bf16+shuffle+zstd:3", "int8+zstd", "int4:sr+zstd", "topk:0.01:ef+zstd",
        "shuffle+zstd", "proj:64+int4:64+zstd", "proj:63+bf16"}) {
    auto chain = *CodecChain::Create(spec);
    const std::vector<uint64_t>& shape = FindProject(chain->spec()) ? rows : flat;
    TensorDecoder decoder;
    ResidualStore residuals;
    DecodedTensor out;
    for (int warmup = 0; warmup < 3; ++warmup) {
      ASSERT_TRUE(decoder.Decode(*chain->Encode(v, shape, &residuals, "k"), &out).ok());
    }
    long before = g_allocations.load();
    for (int i = 0; i < 5; ++i) {
      absl::StatusOr<absl::Span<const uint8_t>> frame = chain->Encode(v, shape, &residuals, "k");
      ASSERT_TRUE(frame.ok());
      ASSERT_TRUE(decoder.Decode(*frame, &out).ok());
    }
    EXPECT_EQ(g_allocations.load() - before, 0) << spec;
  }
}

}  // namespace
}  // namespace strait::compression
