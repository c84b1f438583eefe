// The layout kernels of cuda_kernels.h: copies between layouts (Copy2D, ExtractPatches,
// HeadsToBatch / BatchToHeads) and the embedding table's gather (EmbeddingLookup) and scatter-add
// (EmbeddingBackward). Each grid-stride loop runs over groups of VEC elements of its output.
#include <stdint.h>

#include "site/backend/cuda/cuda_kernels.h"
#include "site/backend/cuda/kernel_support.cuh"
#include "site/backend/op_math.h"

namespace strait::site {
using namespace cuda_kernels_internal;  // NOLINT(build/namespaces): the kernel files' helpers
namespace {

template <int VEC>
__global__ void __launch_bounds__(kThreads)
    Copy2DKernel(int64_t rows, int cols, In src, int64_t ld_src, Out dst, int64_t ld_dst) {
  const int per_row = cols / VEC;
  const int64_t total = rows * per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t r = i / per_row;
    const int64_t c = (i - r * per_row) * VEC;
    float v[VEC];
    LoadV<VEC>(src, r * ld_src + c, v);
    StoreV<VEC>(dst, r * ld_dst + c, v);
  }
}

// y[((b * heads + h) * tokens + t) * dh + j] <-> x[(b * tokens + t) * ldx + h * dh + j], in y's
// order.
template <int VEC>
__global__ void __launch_bounds__(kThreads)
    HeadsKernel(int tokens, int heads, int dh, int64_t total_groups, In src, Out dst, int64_t ldx,
                bool to_batch) {
  const int per_row = dh / VEC;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total_groups;
       i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t bht = i / per_row;
    const int j = static_cast<int>(i - bht * per_row) * VEC;
    const int64_t bh = bht / tokens;
    const int t = static_cast<int>(bht - bh * tokens);
    const int64_t b = bh / heads;
    const int h = static_cast<int>(bh - b * heads);
    const int64_t yi = bht * dh + j;
    const int64_t xi = (b * tokens + t) * ldx + int64_t{h} * dh + j;
    float v[VEC];
    LoadV<VEC>(src, to_batch ? xi : yi, v);
    StoreV<VEC>(dst, to_batch ? yi : xi, v);
  }
}

// patches[b, patch, (c, py, px)] = images[b, c, patch_row * p + py, patch_col * p + px].
template <int VEC>
__global__ void __launch_bounds__(kThreads)
    ExtractPatchesKernel(int channels, int height, int width, int p, int64_t total_groups,
                         In images, Out patches) {
  const int gw = width / p, gh = height / p;
  const int per_row = p / VEC;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total_groups;
       i += int64_t{blockDim.x} * gridDim.x) {
    // i indexes the output's groups: (b, patch, c, py, px / VEC).
    int64_t rest = i / per_row;
    const int px = static_cast<int>(i - rest * per_row) * VEC;
    const int py = static_cast<int>(rest % p);
    rest /= p;
    const int c = static_cast<int>(rest % channels);
    rest /= channels;
    const int patch = static_cast<int>(rest % (int64_t{gh} * gw));
    const int64_t b = rest / (int64_t{gh} * gw);
    const int row = patch / gw * p + py, col = patch % gw * p + px;
    float v[VEC];
    LoadV<VEC>(images, ((b * channels + c) * height + row) * width + col, v);
    StoreV<VEC>(patches, i * VEC, v);
  }
}

template <int VEC>
__global__ void __launch_bounds__(kThreads)
    EmbeddingLookupKernel(int64_t rows, int dim, int vocab, const float* ids, const float* table,
                          Out y) {
  const int per_row = dim / VEC;
  const int64_t total = rows * per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t r = i / per_row;
    const int c = static_cast<int>(i - r * per_row) * VEC;
    const int64_t id = TokenId(ids[r], vocab);
    float v[VEC];
    if (id < 0) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) v[k] = 0.0f;
    } else {
      LoadF32<VEC>(table + id * dim + c, v);
    }
    StoreV<VEC>(y, r * dim + c, v);
  }
}

// dtable[ids[r]] += dy[r], rows in order, without atomics. A warp owns the columns
// [32 * VEC * g, 32 * VEC * (g + 1)) (a lane VEC of them) of the table rows whose id is in its
// bucket (id % buckets == bucket): it scans the ids in order, kScanChunks x 32 at a time (one
// load per lane per chunk, all issued together, then a ballot per chunk finds its rows), and adds
// its rows' dy in row order. Batches of up to kEmbeddingBatch matching rows load their dy and
// table rows together; within a batch a run of one id accumulates in registers, and an id seen
// earlier in the batch (its prefetched row is stale) is reloaded after its store. So each table
// element is the CPU's sequential sum, bit for bit.
constexpr int kEmbeddingBatch = 8;
constexpr int kScanChunks = 8;

// A warp's scan of the ids for the rows of its bucket (id % buckets == bucket), in row order.
class BucketScan {
 public:
  __device__ __forceinline__ BucketScan(int64_t rows, int vocab, const float* ids, int buckets,
                                        int bucket, int lane)
      : rows_(rows), vocab_(vocab), ids_(ids), buckets_(buckets), bucket_(bucket), lane_(lane) {
#pragma unroll
    for (int q = 0; q < P; ++q) seg_ids_[q] = -1, masks_[q] = 0;
  }

  // The bucket's next row: its id (rid; -1 once the rows are exhausted) and its index (rr).
  __device__ __forceinline__ void Take(int& rid, int64_t& rr) {
    const unsigned any = Refill();
    rid = -1;
    rr = 0;
    if (any != 0) {
      // The first chunk with a row left, and its first row.
      int sel = -1;
      unsigned m = 0;
#pragma unroll
      for (int q = 0; q < P; ++q) {
        if (sel < 0 && masks_[q] != 0) sel = q, m = masks_[q];
      }
      const int bit = __ffs(m) - 1;
      int my_id = -1;
#pragma unroll
      for (int q = 0; q < P; ++q) {
        if (q == sel) {
          masks_[q] &= masks_[q] - 1;
          my_id = seg_ids_[q];
        }
      }
      rid = __shfl_sync(kFullMask, my_id, bit);
      rr = seg_ + 32 * sel + bit;
    }
  }

 private:
  static constexpr int P = kScanChunks;

  // The bucket's rows not yet taken in the segment (one bit a row of each chunk, or'ed), after
  // scanning on to the next segment that has some; 0: the rows are exhausted.
  __device__ __forceinline__ unsigned Refill() {
    unsigned any = 0;
#pragma unroll
    for (int q = 0; q < P; ++q) any |= masks_[q];
    while (any == 0 && next_ < rows_) {  // warp-uniform: scan the next segment
      float raw[P];
#pragma unroll
      for (int q = 0; q < P; ++q) {
        const int64_t r = next_ + 32 * q + lane_;
        raw[q] = r < rows_ ? ids_[r] : -1.0f;
      }
#pragma unroll
      for (int q = 0; q < P; ++q) {
        seg_ids_[q] = static_cast<int>(TokenId(raw[q], vocab_));
        masks_[q] = __ballot_sync(kFullMask, seg_ids_[q] >= 0 && seg_ids_[q] % buckets_ == bucket_);
        any |= masks_[q];
      }
      seg_ = next_;
      next_ += 32 * P;
    }
    return any;
  }

  const int64_t rows_;
  const int vocab_;
  const float* const ids_;
  const int buckets_, bucket_, lane_;
  // The scanned segment: rows [seg_, seg_ + 32 * P); seg_ids_[q] is this lane's id in chunk q (row
  // seg_ + 32 * q + lane), masks_[q] the warp's rows in chunk q not yet taken. Warp-uniform except
  // seg_ids_.
  int64_t seg_ = 0, next_ = 0;
  int seg_ids_[P];
  unsigned masks_[P];
};

// Adds the batch's rows of dy (rows rr[b] with id rid[b] >= 0, in order) into this lane's VEC
// columns from c of their table rows.
template <int VEC>
__device__ __forceinline__ void AddBatch(int dim, int c, In dy, float* dtable,
                                         const int (&rid)[kEmbeddingBatch],
                                         const int64_t (&rr)[kEmbeddingBatch]) {
  constexpr int B = kEmbeddingBatch;
  float dyv[B][VEC], tv[B][VEC];
#pragma unroll
  for (int b = 0; b < B; ++b) {
    if (rid[b] >= 0) {
      LoadV<VEC>(dy, rr[b] * dim + c, dyv[b]);
      LoadF32<VEC>(dtable + int64_t{rid[b]} * dim + c, tv[b]);
    }
  }
  int cur = -1;
  float acc[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc[k] = 0.0f;
#pragma unroll
  for (int b = 0; b < B; ++b) {
    if (rid[b] >= 0) {
      if (rid[b] != cur) {
        if (cur >= 0) StoreF32<VEC>(dtable + int64_t{cur} * dim + c, acc);
        bool seen = false;  // stored earlier in this batch: the prefetched row is stale
#pragma unroll
        for (int k = 0; k < b; ++k) seen |= rid[k] == rid[b];
        if (seen) {
          LoadF32<VEC>(dtable + int64_t{rid[b]} * dim + c, acc);
        } else {
#pragma unroll
          for (int k = 0; k < VEC; ++k) acc[k] = tv[b][k];
        }
        cur = rid[b];
      }
#pragma unroll
      for (int k = 0; k < VEC; ++k) acc[k] += dyv[b][k];
    }
  }
  StoreF32<VEC>(dtable + int64_t{cur} * dim + c, acc);
}

template <int VEC>
__global__ void __launch_bounds__(kThreads)
    EmbeddingBackwardKernel(int64_t rows, int dim, int vocab, const float* ids, In dy,
                            float* dtable, int col_groups, int buckets) {
  constexpr int B = kEmbeddingBatch;
  const int lane = threadIdx.x & 31;
  const int64_t w = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  if (w >= int64_t{col_groups} * buckets) return;  // a whole warp
  const int g = static_cast<int>(w % col_groups);
  const int bucket = static_cast<int>(w / col_groups);
  const int c = (g * 32 + lane) * VEC;
  const bool active = c < dim;
  BucketScan scan(rows, vocab, ids, buckets, bucket, lane);
  while (true) {
    int rid[B];
    int64_t rr[B];
#pragma unroll
    for (int b = 0; b < B; ++b) scan.Take(rid[b], rr[b]);
    if (rid[0] < 0) break;  // the rows are exhausted (rid is -1 from the first empty slot on)
    if (active) AddBatch<VEC>(dim, c, dy, dtable, rid, rr);
  }
}

cudaError_t LaunchHeads(cudaStream_t s, int n, int tokens, int heads, int dh, In src, Out dst,
                        int64_t ldx, bool to_batch) {
  if (n <= 0 || tokens <= 0 || heads <= 0 || dh <= 0) return cudaSuccess;
  const int vec = PickVec(IsBf16(src.t) || IsBf16(dst.t), {dh, ldx}, {src.p, dst.p});
  const int64_t elements = int64_t{n} * heads * tokens * dh;
  return ForVec(vec, [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    HeadsKernel<VEC><<<GridFor(elements / VEC), kThreads, 0, s>>>(tokens, heads, dh, elements / VEC,
                                                                  src, dst, ldx, to_batch);
    return cudaGetLastError();
  });
}

}  // namespace

cudaError_t LaunchCopy2D(cudaStream_t s, int64_t rows, int cols, ConstTypedPtr src, int64_t ld_src,
                         TypedPtr dst, int64_t ld_dst) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const int vec =
      PickVec(!src.is_f32() || !dst.is_f32(), {cols, ld_src, ld_dst}, {src.data(), dst.data()});
  return ForVec(vec, [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    Copy2DKernel<VEC><<<GridFor(rows * (cols / VEC)), kThreads, 0, s>>>(
        rows, cols, ViewOf(src), ld_src, ViewOf(dst), ld_dst);
    return cudaGetLastError();
  });
}

cudaError_t LaunchExtractPatches(cudaStream_t s, int n, int channels, int height, int width, int p,
                                 ConstTypedPtr images, TypedPtr patches) {
  if (n <= 0 || channels <= 0 || p <= 0 || height < p || width < p) return cudaSuccess;
  const int vec =
      PickVec(!images.is_f32() || !patches.is_f32(), {p, width}, {images.data(), patches.data()});
  const int64_t elements =
      int64_t{n} * (height / p) * (width / p) * channels * p * p;  // of the output
  return ForVec(vec, [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    ExtractPatchesKernel<VEC><<<GridFor(elements / VEC), kThreads, 0, s>>>(
        channels, height, width, p, elements / VEC, ViewOf(images), ViewOf(patches));
    return cudaGetLastError();
  });
}

cudaError_t LaunchHeadsToBatch(cudaStream_t s, int n, int tokens, int heads, int dh,
                               ConstTypedPtr x, int64_t ldx, TypedPtr y) {
  return LaunchHeads(s, n, tokens, heads, dh, ViewOf(x), ViewOf(y), ldx, true);
}

cudaError_t LaunchBatchToHeads(cudaStream_t s, int n, int tokens, int heads, int dh,
                               ConstTypedPtr y, TypedPtr x, int64_t ldx) {
  return LaunchHeads(s, n, tokens, heads, dh, ViewOf(y), ViewOf(x), ldx, false);
}

cudaError_t LaunchEmbeddingLookup(cudaStream_t s, int64_t rows, int dim, int vocab,
                                  const float* ids, const float* table, TypedPtr y) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  const int vec = PickVec(!y.is_f32(), {dim}, {table, y.data()});
  return ForVec(vec, [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    EmbeddingLookupKernel<VEC>
        <<<GridFor(rows * (dim / VEC)), kThreads, 0, s>>>(rows, dim, vocab, ids, table, ViewOf(y));
    return cudaGetLastError();
  });
}

cudaError_t LaunchEmbeddingBackward(cudaStream_t s, int64_t rows, int dim, int vocab,
                                    const float* ids, ConstTypedPtr dy, float* dtable) {
  if (rows <= 0 || dim <= 0 || vocab <= 0) return cudaSuccess;
  // Four columns a lane where the rows allow it (16-byte f32 / 8-byte bf16 accesses).
  const int vec = PickVec(false, {dim}, {dy.data(), dtable}) >= 4 ? 4 : 1;
  const int col_groups = (dim + 32 * vec - 1) / (32 * vec);
  // About 2048 warps: more buckets shorten each warp's chain of rows, but every warp scans all
  // the ids.
  int buckets = 2048 / col_groups;
  if (buckets > vocab) buckets = vocab;
  if (buckets < 1) buckets = 1;
  const int64_t warps = int64_t{col_groups} * buckets;
  const unsigned blocks = static_cast<unsigned>((warps + kWarps - 1) / kWarps);
  if (vec == 4) {
    EmbeddingBackwardKernel<4><<<blocks, kThreads, 0, s>>>(rows, dim, vocab, ids, ViewOf(dy),
                                                           dtable, col_groups, buckets);
  } else {
    EmbeddingBackwardKernel<1><<<blocks, kThreads, 0, s>>>(rows, dim, vocab, ids, ViewOf(dy),
                                                           dtable, col_groups, buckets);
  }
  return cudaGetLastError();
}

}  // namespace strait::site
