// Fused f32 self-attention kernels (attention_kernels.h) on the model's interleaved layout: a
// block serves 64 rows of one (sample, head); the rows of a head are read in place from qkv / out
// / dout (row stride 3 * heads * dh or heads * dh, the head's columns at h * dh) and the results
// are written in place into out / dqkv.
//
// A group of kTpr threads shares each row it owns (a query, or a key in the dK/dV pass): two
// threads for heads up to 64 wide, four above (so that a head of 128 keeps its rows and sums in
// registers). Thread `lane` of the group holds the row's float4 chunks lane, lane + kTpr, ...; the
// group adds its partial dot products with kTpr - 1 shuffles (xor 1, then xor 2), after which every
// thread holds the same sum. The other side (keys and values, or queries and output gradients)
// streams through shared memory kFusedAttentionKeyTile rows at a time, each row read by a whole
// warp at once (a broadcast). Every sum runs in a fixed order: the results are deterministic. With
// two threads a row, the sums are in the order of the CPU's fused attention (cpu_attention.cc).
#include <math.h>

#include <cstdint>
#include <type_traits>

#include "site/backend/backend.h"
#include "site/backend/cuda/attention_kernels.h"
#include "site/backend/op_math.h"

namespace strait::site {
namespace {

constexpr int kRowsPerBlock = 64;
constexpr int kTile = kFusedAttentionKeyTile;
constexpr unsigned kFullMask = 0xffffffffu;

// How the rows of a head of width DH are spread over threads.
template <int DH>
struct RowShape {
  static constexpr int kTpr = DH <= 64 ? 2 : 4;           // threads per row
  static constexpr int kChunks = DH / 4;                  // float4 chunks in a row
  static constexpr int kC = (kChunks + kTpr - 1) / kTpr;  // chunk slots per thread
  static constexpr int kThreads = kTpr * kRowsPerBlock;
  static constexpr int kUnroll = DH <= 64 ? 4 : 2;  // rows per step of the backward's inner loops
  // Whether slot c of thread `lane` holds a chunk: only the last slot can be short.
  __device__ static __forceinline__ bool Has(int c, int lane) {
    return kChunks % kTpr == 0 || c < kC - 1 || kTpr * c + lane < kChunks;
  }
};

// The head's geometry: rows of qkv and out, and where a (sample, head) starts.
struct Geometry {
  int tokens = 0, heads = 0;
  float scale = 1.0f;
  bool causal = false;
  int64_t ld_qkv = 0;  // 3 * heads * dh
  int64_t ld_out = 0;  // heads * dh
};

__device__ __forceinline__ void Axpy(float a, float4 x, float4& y) {
  y.x += a * x.x;
  y.y += a * x.y;
  y.z += a * x.z;
  y.w += a * x.w;
}

// The dot product of the row a thread group holds in registers with a row of shared memory.
template <int DH>
__device__ __forceinline__ float GroupDot(const float4 (&a)[RowShape<DH>::kC], const float4* b,
                                          int lane) {
  using S = RowShape<DH>;
  float d = 0.0f;
#pragma unroll
  for (int c = 0; c < S::kC; ++c) {
    if (S::Has(c, lane)) {
      const float4 x = b[S::kTpr * c + lane];
      d += a[c].x * x.x + a[c].y * x.y + a[c].z * x.z + a[c].w * x.w;
    }
  }
#pragma unroll
  for (int offset = 1; offset < S::kTpr; offset <<= 1) d += __shfl_xor_sync(kFullMask, d, offset);
  return d;
}

// acc += a * (this thread's chunks of a row of shared memory).
template <int DH>
__device__ __forceinline__ void GroupAxpy(float a, const float4* x, int lane,
                                          float4 (&acc)[RowShape<DH>::kC]) {
  using S = RowShape<DH>;
#pragma unroll
  for (int c = 0; c < S::kC; ++c) {
    if (S::Has(c, lane)) Axpy(a, x[S::kTpr * c + lane], acc[c]);
  }
}

// This thread's chunks of a row of DH floats (zeros in the missing slots).
template <int DH>
__device__ __forceinline__ void LoadRow(const float* row, int lane, float4 (&r)[RowShape<DH>::kC]) {
  using S = RowShape<DH>;
  const float4* p = reinterpret_cast<const float4*>(row);
#pragma unroll
  for (int c = 0; c < S::kC; ++c) {
    r[c] = S::Has(c, lane) ? p[S::kTpr * c + lane] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

template <int DH>
__device__ __forceinline__ void StoreRow(const float4 (&r)[RowShape<DH>::kC], float scale, int lane,
                                         float* row) {
  using S = RowShape<DH>;
  float4* p = reinterpret_cast<float4*>(row);
#pragma unroll
  for (int c = 0; c < S::kC; ++c) {
    if (S::Has(c, lane)) {
      p[S::kTpr * c + lane] =
          make_float4(r[c].x * scale, r[c].y * scale, r[c].z * scale, r[c].w * scale);
    }
  }
}

template <int DH>
__device__ __forceinline__ void Zero(float4 (&r)[RowShape<DH>::kC]) {
#pragma unroll
  for (int c = 0; c < RowShape<DH>::kC; ++c) r[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
}

// Rows [first, first + kTile) of a head (row t at x + t * ld) into `tile`, zeros past the last
// token.
template <int DH>
__device__ __forceinline__ void LoadTile(const float* x, int64_t ld, int first, int tokens,
                                         float4 (*tile)[DH / 4]) {
  using S = RowShape<DH>;
  for (int e = threadIdx.x; e < kTile * S::kChunks; e += S::kThreads) {
    const int r = e / S::kChunks, c = e % S::kChunks;
    tile[r][c] = first + r < tokens
                     ? reinterpret_cast<const float4*>(x + int64_t{first + r} * ld)[c]
                     : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// The (sample, head) of the block and the first of its 64 rows. `reverse`: the last row blocks
// first (under the causal mask they have the most keys to see).
struct Block {
  int b, h, bh, first;
};

__device__ __forceinline__ Block BlockOf(const Geometry& g, bool reverse) {
  Block k;
  k.bh = static_cast<int>(blockIdx.x);
  k.b = k.bh / g.heads;
  k.h = k.bh - k.b * g.heads;
  const int block =
      reverse ? static_cast<int>(gridDim.y - 1 - blockIdx.y) : static_cast<int>(blockIdx.y);
  k.first = block * kRowsPerBlock;
  return k;
}

// Row 0 of the block's head in qkv's query part (add heads * dh for its key, 2 * heads * dh for
// its value), and in out.
template <int DH>
__device__ __forceinline__ int64_t QkvHead(const Geometry& g, const Block& k) {
  return int64_t{k.b} * g.tokens * g.ld_qkv + int64_t{k.h} * DH;
}
template <int DH>
__device__ __forceinline__ int64_t OutHead(const Geometry& g, const Block& k) {
  return int64_t{k.b} * g.tokens * g.ld_out + int64_t{k.h} * DH;
}

// Grid (samples x heads, query blocks). Rows past the last token compute a copy of the last row
// (so that every thread takes part in the shuffles) and write nothing.
template <int DH>
__global__ void __launch_bounds__(RowShape<DH>::kThreads)
    FusedAttentionForwardKernel(Geometry g, const float* qkv, float* out, float* lse) {
  using S = RowShape<DH>;
  constexpr int C = S::kC;
  __shared__ float4 ks[kTile][DH / 4], vs[kTile][DH / 4];
  const Block blk = BlockOf(g, g.causal);
  const float* q = qkv + QkvHead<DH>(g, blk);
  const float* k = q + int64_t{g.heads} * DH;
  const float* v = k + int64_t{g.heads} * DH;
  const int lane = threadIdx.x % S::kTpr;
  const int first = blk.first;
  const int i = first + static_cast<int>(threadIdx.x / S::kTpr);
  const int row = min(i, g.tokens - 1);
  float4 qr[C], acc[C];
  LoadRow<DH>(q + int64_t{row} * g.ld_qkv, lane, qr);
  Zero<DH>(acc);
  float m = -INFINITY, l = 0.0f;
  const int keys = g.causal ? min(g.tokens, first + kRowsPerBlock) : g.tokens;
  for (int j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();
    LoadTile<DH>(k, g.ld_qkv, j0, g.tokens, ks);
    LoadTile<DH>(v, g.ld_qkv, j0, g.tokens, vs);
    __syncthreads();
    float s[kTile];
    float tile_max = -INFINITY;
#pragma unroll
    for (int r = 0; r < kTile; ++r) {
      const float d = GroupDot<DH>(qr, ks[r], lane);
      const int j = j0 + r;
      s[r] = j < g.tokens && (!g.causal || j <= row) ? g.scale * d : -INFINITY;
      tile_max = fmaxf(tile_max, s[r]);
    }
    // Key 0 is in the first tile and every row sees it, so m_new is finite from there on.
    const float m_new = fmaxf(m, tile_max);
    const float correction = expf(m - m_new);
    l *= correction;
#pragma unroll
    for (int c = 0; c < C; ++c) {
      acc[c] = make_float4(acc[c].x * correction, acc[c].y * correction, acc[c].z * correction,
                           acc[c].w * correction);
    }
#pragma unroll
    for (int r = 0; r < kTile; ++r) {
      const float p = expf(s[r] - m_new);
      l += p;
      GroupAxpy<DH>(p, vs[r], lane, acc);
    }
    m = m_new;
  }
  if (i < g.tokens) {
    StoreRow<DH>(acc, 1.0f / l, lane, out + OutHead<DH>(g, blk) + int64_t{i} * g.ld_out);
    if (lane == 0) lse[int64_t{blk.bh} * g.tokens + i] = m + logf(l);
  }
}

// delta[b, h, t] = sum over the head's columns of dout * out, a thread per (b, h, t), the columns
// in order.
__global__ void __launch_bounds__(256)
    AttentionDeltaKernel(Geometry g, int dh, int64_t queries, const float* dout, const float* out,
                         float* delta) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < queries;
       i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t bh = i / g.tokens;
    const int t = static_cast<int>(i - bh * g.tokens);
    const int64_t b = bh / g.heads;
    const int h = static_cast<int>(bh - b * g.heads);
    const int64_t at = (b * g.tokens + t) * g.ld_out + int64_t{h} * dh;
    const float4* go = reinterpret_cast<const float4*>(dout + at);
    const float4* o = reinterpret_cast<const float4*>(out + at);
    float d = 0.0f;
    for (int c = 0; c < dh / 4; ++c) {
      const float4 x = go[c], y = o[c];
      d += x.x * y.x;
      d += x.y * y.y;
      d += x.z * y.z;
      d += x.w * y.w;
    }
    delta[i] = d;
  }
}

// dq: a thread group per query, keys and values streaming. Grid as the forward's.
template <int DH>
__global__ void __launch_bounds__(RowShape<DH>::kThreads)
    FusedAttentionDqKernel(Geometry g, const float* qkv, const float* lse, const float* delta,
                           const float* dout, float* dqkv) {
  using S = RowShape<DH>;
  constexpr int C = S::kC;
  __shared__ float4 ks[kTile][DH / 4], vs[kTile][DH / 4];
  const Block blk = BlockOf(g, g.causal);
  const int64_t head = QkvHead<DH>(g, blk);
  const float* q = qkv + head;
  const float* k = q + int64_t{g.heads} * DH;
  const float* v = k + int64_t{g.heads} * DH;
  const int lane = threadIdx.x % S::kTpr;
  const int first = blk.first;
  const int i = first + static_cast<int>(threadIdx.x / S::kTpr);
  const int row = min(i, g.tokens - 1);
  float4 qr[C], gr[C], acc[C];
  LoadRow<DH>(q + int64_t{row} * g.ld_qkv, lane, qr);
  LoadRow<DH>(dout + OutHead<DH>(g, blk) + int64_t{row} * g.ld_out, lane, gr);
  Zero<DH>(acc);
  const int64_t stat = int64_t{blk.bh} * g.tokens + row;
  const float row_lse = lse[stat], row_delta = delta[stat];
  const int keys = g.causal ? min(g.tokens, first + kRowsPerBlock) : g.tokens;
  for (int j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();
    LoadTile<DH>(k, g.ld_qkv, j0, g.tokens, ks);
    LoadTile<DH>(v, g.ld_qkv, j0, g.tokens, vs);
    __syncthreads();
#pragma unroll S::kUnroll
    for (int r = 0; r < kTile; ++r) {
      const float s = g.scale * GroupDot<DH>(qr, ks[r], lane);
      const float dp = GroupDot<DH>(gr, vs[r], lane);
      const int j = j0 + r;
      const float p = j < g.tokens && (!g.causal || j <= row) ? expf(s - row_lse) : 0.0f;
      const float ds = g.scale * p * (dp - row_delta);
      GroupAxpy<DH>(ds, ks[r], lane, acc);
    }
  }
  if (i < g.tokens) StoreRow<DH>(acc, 1.0f, lane, dqkv + head + int64_t{i} * g.ld_qkv);
}

// dk and dv: a thread group per key, queries, output gradients and their lse and delta streaming.
template <int DH>
__global__ void __launch_bounds__(RowShape<DH>::kThreads)
    FusedAttentionDkDvKernel(Geometry g, const float* qkv, const float* lse, const float* delta,
                             const float* dout, float* dqkv) {
  using S = RowShape<DH>;
  constexpr int C = S::kC;
  __shared__ float4 qs[kTile][DH / 4], gs[kTile][DH / 4];
  __shared__ float lse_s[kTile], delta_s[kTile];
  const Block blk = BlockOf(g, false);  // under the causal mask the first key blocks work most
  const int64_t head = QkvHead<DH>(g, blk);
  const float* q = qkv + head;
  const float* k = q + int64_t{g.heads} * DH;
  const float* v = k + int64_t{g.heads} * DH;
  const float* go = dout + OutHead<DH>(g, blk);
  const float* head_lse = lse + int64_t{blk.bh} * g.tokens;
  const float* head_delta = delta + int64_t{blk.bh} * g.tokens;
  const int lane = threadIdx.x % S::kTpr;
  const int first = blk.first;
  const int j = first + static_cast<int>(threadIdx.x / S::kTpr);
  const int col = min(j, g.tokens - 1);
  float4 kr[C], vr[C], dk_acc[C], dv_acc[C];
  LoadRow<DH>(k + int64_t{col} * g.ld_qkv, lane, kr);
  LoadRow<DH>(v + int64_t{col} * g.ld_qkv, lane, vr);
  Zero<DH>(dk_acc);
  Zero<DH>(dv_acc);
  // Under the causal mask no query before the block's first key sees any of its keys.
  for (int i0 = g.causal ? first : 0; i0 < g.tokens; i0 += kTile) {
    __syncthreads();
    LoadTile<DH>(q, g.ld_qkv, i0, g.tokens, qs);
    LoadTile<DH>(go, g.ld_out, i0, g.tokens, gs);
    for (int r = threadIdx.x; r < kTile; r += S::kThreads) {
      const bool in = i0 + r < g.tokens;
      lse_s[r] = in ? head_lse[i0 + r] : 0.0f;
      delta_s[r] = in ? head_delta[i0 + r] : 0.0f;
    }
    __syncthreads();
#pragma unroll S::kUnroll
    for (int r = 0; r < kTile; ++r) {
      const float s = g.scale * GroupDot<DH>(kr, qs[r], lane);
      const float dp = GroupDot<DH>(vr, gs[r], lane);
      const int i = i0 + r;
      const float p = i < g.tokens && (!g.causal || col <= i) ? expf(s - lse_s[r]) : 0.0f;
      const float ds = g.scale * p * (dp - delta_s[r]);
      GroupAxpy<DH>(p, gs[r], lane, dv_acc);
      GroupAxpy<DH>(ds, qs[r], lane, dk_acc);
    }
  }
  if (j < g.tokens) {
    float* dk = dqkv + head + int64_t{g.heads} * DH + int64_t{j} * g.ld_qkv;
    StoreRow<DH>(dk_acc, 1.0f, lane, dk);
    StoreRow<DH>(dv_acc, 1.0f, lane, dk + int64_t{g.heads} * DH);
  }
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Calls f(std::integral_constant<int, dh>) for a head width the kernels are built for.
template <typename F>
cudaError_t ForHeadDim(int dh, F&& f) {
  switch (dh) {
#define STRAIT_HEAD_DIM(D) \
  case D:                  \
    return f(std::integral_constant<int, D>{});
    STRAIT_HEAD_DIM(8)
    STRAIT_HEAD_DIM(16)
    STRAIT_HEAD_DIM(24)
    STRAIT_HEAD_DIM(32)
    STRAIT_HEAD_DIM(40)
    STRAIT_HEAD_DIM(48)
    STRAIT_HEAD_DIM(56)
    STRAIT_HEAD_DIM(64)
    STRAIT_HEAD_DIM(72)
    STRAIT_HEAD_DIM(80)
    STRAIT_HEAD_DIM(88)
    STRAIT_HEAD_DIM(96)
    STRAIT_HEAD_DIM(104)
    STRAIT_HEAD_DIM(112)
    STRAIT_HEAD_DIM(120)
    STRAIT_HEAD_DIM(128)
#undef STRAIT_HEAD_DIM
    default:
      return cudaErrorInvalidValue;
  }
}
static_assert(kFusedAttentionMaxHeadDim == 128, "ForHeadDim instantiates widths up to 128");

// The launch geometry, or false when the kernels cannot take the shape.
bool Prepare(const AttentionDims& d, Geometry* g, dim3* grid) {
  if (!FusedAttentionTakes(d.dh)) return false;
  const int64_t heads = int64_t{d.n} * d.heads;
  const int64_t blocks = (int64_t{d.tokens} + kRowsPerBlock - 1) / kRowsPerBlock;
  if (heads > 0x7fffffff || blocks > 65535) return false;
  g->tokens = d.tokens;
  g->heads = d.heads;
  g->scale = d.scale;
  g->causal = d.causal;
  g->ld_out = d.width();
  g->ld_qkv = 3 * d.width();
  *grid = dim3(static_cast<unsigned>(heads), static_cast<unsigned>(blocks));
  return true;
}

}  // namespace

cudaError_t LaunchFusedAttentionForward(cudaStream_t s, const AttentionDims& d, const float* qkv,
                                        float* out, float* lse) {
  if (d.n <= 0 || d.tokens <= 0 || d.heads <= 0) return cudaSuccess;
  Geometry g;
  dim3 grid;
  if (!Prepare(d, &g, &grid) || !Aligned(qkv) || !Aligned(out)) return cudaErrorInvalidValue;
  return ForHeadDim(d.dh, [&](auto width) {
    constexpr int DH = decltype(width)::value;
    FusedAttentionForwardKernel<DH><<<grid, RowShape<DH>::kThreads, 0, s>>>(g, qkv, out, lse);
    return cudaGetLastError();
  });
}

cudaError_t LaunchFusedAttentionBackward(cudaStream_t s, const AttentionDims& d, const float* qkv,
                                         const float* out, const float* lse, const float* dout,
                                         float* delta, float* dqkv) {
  if (d.n <= 0 || d.tokens <= 0 || d.heads <= 0) return cudaSuccess;
  Geometry g;
  dim3 grid;
  if (!Prepare(d, &g, &grid) || !Aligned(qkv) || !Aligned(out) || !Aligned(dout) ||
      !Aligned(dqkv)) {
    return cudaErrorInvalidValue;
  }
  const int64_t queries = d.queries();
  int64_t blocks = (queries + 255) / 256;
  if (blocks > 65535) blocks = 65535;
  AttentionDeltaKernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(g, d.dh, queries, dout, out,
                                                                     delta);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return ForHeadDim(d.dh, [&](auto width) {
    constexpr int DH = decltype(width)::value;
    FusedAttentionDqKernel<DH>
        <<<grid, RowShape<DH>::kThreads, 0, s>>>(g, qkv, lse, delta, dout, dqkv);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    FusedAttentionDkDvKernel<DH>
        <<<grid, RowShape<DH>::kThreads, 0, s>>>(g, qkv, lse, delta, dout, dqkv);
    return cudaGetLastError();
  });
}

}  // namespace strait::site
