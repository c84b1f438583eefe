// Fused self-attention kernels (attention_kernels.h). Two threads share each row they own (a query,
// or a key in the dK/dV pass), each holding half of the row's columns as float4 chunks (chunk
// 2c + lane), so that a head of 64 floats keeps its rows and sums in registers; a pair adds its two
// partial dot products with one shuffle, and both threads then hold the same sum. The other side
// (keys and values, or queries and output gradients) streams through shared memory
// kFusedAttentionKeyTile rows at a time, each row read by a whole warp at once (a broadcast). Every
// sum runs in a fixed order: the results are deterministic.
#include <math.h>

#include <cstdint>
#include <type_traits>

#include "site/backend/backend.h"
#include "site/backend/cuda/attention_kernels.h"
#include "site/backend/op_math.h"

namespace strait::site {
namespace {

constexpr int kRowsPerBlock = 64;
constexpr int kThreadsPerBlock = 2 * kRowsPerBlock;
constexpr int kTile = kFusedAttentionKeyTile;

__device__ inline float Rounded(float x, bool bf16) { return bf16 ? RoundToBf16(x) : x; }

__device__ inline float4 Rounded(float4 x, bool bf16) {
  if (!bf16) return x;
  return make_float4(RoundToBf16(x.x), RoundToBf16(x.y), RoundToBf16(x.z), RoundToBf16(x.w));
}

__device__ inline void Axpy(float a, float4 x, float4& y) {
  y.x += a * x.x;
  y.y += a * x.y;
  y.z += a * x.z;
  y.w += a * x.w;
}

// The dot product of the row a thread pair holds in registers with a row of shared memory.
template <int C>
__device__ inline float PairDot(const float4 (&a)[C], const float4* b, int lane) {
  float d = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    const float4 x = b[2 * c + lane];
    d += a[c].x * x.x + a[c].y * x.y + a[c].z * x.z + a[c].w * x.w;
  }
  return d + __shfl_xor_sync(0xffffffffu, d, 1);
}

// This thread's half of a row of DH floats.
template <int C>
__device__ inline void LoadRow(const float* row, int lane, bool bf16, float4 (&r)[C]) {
  const float4* p = reinterpret_cast<const float4*>(row);
#pragma unroll
  for (int c = 0; c < C; ++c) r[c] = Rounded(p[2 * c + lane], bf16);
}

template <int C>
__device__ inline void StoreRow(const float4 (&r)[C], float scale, int lane, float* row) {
  float4* p = reinterpret_cast<float4*>(row);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    p[2 * c + lane] = make_float4(r[c].x * scale, r[c].y * scale, r[c].z * scale, r[c].w * scale);
  }
}

// Rows [first, first + kTile) of x [tokens, DH] into `tile`, zeros past the last token.
template <int DH>
__device__ inline void LoadTile(const float* x, int first, int tokens, bool bf16,
                                float4 (*tile)[DH / 4]) {
  const float4* p = reinterpret_cast<const float4*>(x);
  for (int e = threadIdx.x; e < kTile * (DH / 4); e += kThreadsPerBlock) {
    const int r = e / (DH / 4), c = e % (DH / 4);
    tile[r][c] = first + r < tokens ? Rounded(p[int64_t{first + r} * (DH / 4) + c], bf16)
                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// Grid (query blocks, heads). Rows past the last token compute a copy of the last row (so that
// every thread takes part in the shuffles) and write nothing.
template <int DH>
__global__ void __launch_bounds__(kThreadsPerBlock)
    FusedAttentionForwardKernel(int tokens, float scale, bool causal, bool bf16, const float* q,
                                const float* k, const float* v, float* o, float* lse) {
  constexpr int C = DH / 8;
  __shared__ float4 ks[kTile][DH / 4], vs[kTile][DH / 4];
  const int64_t head = blockIdx.y, base = head * tokens * DH;
  const int lane = threadIdx.x & 1;
  const int first = blockIdx.x * kRowsPerBlock;
  const int i = first + static_cast<int>(threadIdx.x / 2);
  const int row = min(i, tokens - 1);
  float4 qr[C], acc[C];
  LoadRow<C>(q + base + int64_t{row} * DH, lane, bf16, qr);
#pragma unroll
  for (int c = 0; c < C; ++c) acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float m = -INFINITY, l = 0.0f;
  const int keys = causal ? min(tokens, first + kRowsPerBlock) : tokens;
  for (int j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();
    LoadTile<DH>(k + base, j0, tokens, bf16, ks);
    LoadTile<DH>(v + base, j0, tokens, bf16, vs);
    __syncthreads();
    float s[kTile];
    float tile_max = -INFINITY;
#pragma unroll
    for (int r = 0; r < kTile; ++r) {
      const float d = PairDot<C>(qr, ks[r], lane);
      const int j = j0 + r;
      s[r] = j < tokens && (!causal || j <= row) ? scale * d : -INFINITY;
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
      const float pr = Rounded(p, bf16);
#pragma unroll
      for (int c = 0; c < C; ++c) Axpy(pr, vs[r][2 * c + lane], acc[c]);
    }
    m = m_new;
  }
  if (i < tokens) {
    StoreRow<C>(acc, 1.0f / l, lane, o + base + int64_t{i} * DH);
    if (lane == 0) lse[head * tokens + i] = m + logf(l);
  }
}

// delta[r] = sum of d_o[r, :] * o[r, :], a thread per row.
__global__ void AttentionDeltaKernel(int64_t rows, int dh, const float* d_o, const float* o,
                                     float* delta) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows;
       r += int64_t{blockDim.x} * gridDim.x) {
    float d = 0.0f;
    for (int c = 0; c < dh; ++c) d += d_o[r * dh + c] * o[r * dh + c];
    delta[r] = d;
  }
}

// dq: a thread pair per query, keys and values streaming. Grid as the forward's.
template <int DH>
__global__ void __launch_bounds__(kThreadsPerBlock)
    FusedAttentionDqKernel(int tokens, float scale, bool causal, bool bf16, const float* q,
                           const float* k, const float* v, const float* lse, const float* delta,
                           const float* d_o, float* dq) {
  constexpr int C = DH / 8;
  __shared__ float4 ks[kTile][DH / 4], vs[kTile][DH / 4];
  const int64_t head = blockIdx.y, base = head * tokens * DH;
  const int lane = threadIdx.x & 1;
  const int first = blockIdx.x * kRowsPerBlock;
  const int i = first + static_cast<int>(threadIdx.x / 2);
  const int row = min(i, tokens - 1);
  float4 qr[C], gr[C], acc[C];
  LoadRow<C>(q + base + int64_t{row} * DH, lane, bf16, qr);
  LoadRow<C>(d_o + base + int64_t{row} * DH, lane, bf16, gr);
#pragma unroll
  for (int c = 0; c < C; ++c) acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const float row_lse = lse[head * tokens + row], row_delta = delta[head * tokens + row];
  const int keys = causal ? min(tokens, first + kRowsPerBlock) : tokens;
  for (int j0 = 0; j0 < keys; j0 += kTile) {
    __syncthreads();
    LoadTile<DH>(k + base, j0, tokens, bf16, ks);
    LoadTile<DH>(v + base, j0, tokens, bf16, vs);
    __syncthreads();
#pragma unroll 4
    for (int r = 0; r < kTile; ++r) {
      const float s = scale * PairDot<C>(qr, ks[r], lane);
      const float dp = PairDot<C>(gr, vs[r], lane);
      const int j = j0 + r;
      const float p = j < tokens && (!causal || j <= row) ? expf(s - row_lse) : 0.0f;
      const float ds = Rounded(scale * p * (dp - row_delta), bf16);
#pragma unroll
      for (int c = 0; c < C; ++c) Axpy(ds, ks[r][2 * c + lane], acc[c]);
    }
  }
  if (i < tokens) StoreRow<C>(acc, 1.0f, lane, dq + base + int64_t{i} * DH);
}

// dk and dv: a thread pair per key, queries, output gradients and their lse and delta streaming.
template <int DH>
__global__ void __launch_bounds__(kThreadsPerBlock)
    FusedAttentionDkDvKernel(int tokens, float scale, bool causal, bool bf16, const float* q,
                             const float* k, const float* v, const float* lse, const float* delta,
                             const float* d_o, float* dk, float* dv) {
  constexpr int C = DH / 8;
  __shared__ float4 qs[kTile][DH / 4], gs[kTile][DH / 4];
  __shared__ float lse_s[kTile], delta_s[kTile];
  const int64_t head = blockIdx.y, base = head * tokens * DH;
  const int lane = threadIdx.x & 1;
  const int first = blockIdx.x * kRowsPerBlock;
  const int j = first + static_cast<int>(threadIdx.x / 2);
  const int col = min(j, tokens - 1);
  float4 kr[C], vr[C], dk_acc[C], dv_acc[C];
  LoadRow<C>(k + base + int64_t{col} * DH, lane, bf16, kr);
  LoadRow<C>(v + base + int64_t{col} * DH, lane, bf16, vr);
#pragma unroll
  for (int c = 0; c < C; ++c) {
    dk_acc[c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    dv_acc[c] = dk_acc[c];
  }
  // Under the causal mask no query before the block's first key sees any of its keys.
  for (int i0 = causal ? first : 0; i0 < tokens; i0 += kTile) {
    __syncthreads();
    LoadTile<DH>(q + base, i0, tokens, bf16, qs);
    LoadTile<DH>(d_o + base, i0, tokens, bf16, gs);
    for (int r = threadIdx.x; r < kTile; r += kThreadsPerBlock) {
      const bool in = i0 + r < tokens;
      lse_s[r] = in ? lse[head * tokens + i0 + r] : 0.0f;
      delta_s[r] = in ? delta[head * tokens + i0 + r] : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int r = 0; r < kTile; ++r) {
      const float s = scale * PairDot<C>(kr, qs[r], lane);
      const float dp = PairDot<C>(vr, gs[r], lane);
      const int i = i0 + r;
      const float p = i < tokens && (!causal || col <= i) ? expf(s - lse_s[r]) : 0.0f;
      const float pr = Rounded(p, bf16);
      const float ds = Rounded(scale * p * (dp - delta_s[r]), bf16);
#pragma unroll
      for (int c = 0; c < C; ++c) {
        Axpy(pr, gs[r][2 * c + lane], dv_acc[c]);
        Axpy(ds, qs[r][2 * c + lane], dk_acc[c]);
      }
    }
  }
  if (j < tokens) {
    StoreRow<C>(dk_acc, 1.0f, lane, dk + base + int64_t{j} * DH);
    StoreRow<C>(dv_acc, 1.0f, lane, dv + base + int64_t{j} * DH);
  }
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Calls f(std::integral_constant<int, dh>) for a head width the kernels are built for.
template <typename F>
cudaError_t ForHeadDim(int dh, F&& f) {
  switch (dh) {
    case 8:
      return f(std::integral_constant<int, 8>{});
    case 16:
      return f(std::integral_constant<int, 16>{});
    case 24:
      return f(std::integral_constant<int, 24>{});
    case 32:
      return f(std::integral_constant<int, 32>{});
    case 40:
      return f(std::integral_constant<int, 40>{});
    case 48:
      return f(std::integral_constant<int, 48>{});
    case 56:
      return f(std::integral_constant<int, 56>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    default:
      return cudaErrorInvalidValue;
  }
}
static_assert(kFusedAttentionMaxHeadDim == 64, "ForHeadDim instantiates widths up to 64");

dim3 Grid(int batch, int tokens) {
  return dim3(static_cast<unsigned>((tokens + kRowsPerBlock - 1) / kRowsPerBlock),
              static_cast<unsigned>(batch));
}

}  // namespace

cudaError_t LaunchFusedAttentionForward(cudaStream_t s, int batch, int tokens, int dh, float scale,
                                        bool causal, bool bf16, const float* q, const float* k,
                                        const float* v, float* o, float* lse) {
  if (batch <= 0 || tokens <= 0) return cudaSuccess;
  if (batch > 65535 || !FusedAttentionTakes(dh) || !Aligned(q) || !Aligned(k) || !Aligned(v) ||
      !Aligned(o)) {
    return cudaErrorInvalidValue;
  }
  return ForHeadDim(dh, [&](auto width) {
    FusedAttentionForwardKernel<decltype(width)::value>
        <<<Grid(batch, tokens), kThreadsPerBlock, 0, s>>>(tokens, scale, causal, bf16, q, k, v, o,
                                                          lse);
    return cudaGetLastError();
  });
}

cudaError_t LaunchFusedAttentionBackward(cudaStream_t s, int batch, int tokens, int dh, float scale,
                                         bool causal, bool bf16, const float* q, const float* k,
                                         const float* v, const float* o, const float* lse,
                                         const float* d_o, float* delta, float* dq, float* dk,
                                         float* dv) {
  if (batch <= 0 || tokens <= 0) return cudaSuccess;
  for (const void* p :
       {static_cast<const void*>(q), static_cast<const void*>(k), static_cast<const void*>(v),
        static_cast<const void*>(d_o), static_cast<const void*>(dq), static_cast<const void*>(dk),
        static_cast<const void*>(dv)}) {
    if (!Aligned(p)) return cudaErrorInvalidValue;
  }
  if (batch > 65535 || !FusedAttentionTakes(dh)) return cudaErrorInvalidValue;
  const int64_t rows = int64_t{batch} * tokens, blocks = (rows + 255) / 256;
  AttentionDeltaKernel<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0, s>>>(
      rows, dh, d_o, o, delta);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  return ForHeadDim(dh, [&](auto width) {
    constexpr int DH = decltype(width)::value;
    FusedAttentionDqKernel<DH><<<Grid(batch, tokens), kThreadsPerBlock, 0, s>>>(
        tokens, scale, causal, bf16, q, k, v, lse, delta, d_o, dq);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    FusedAttentionDkDvKernel<DH><<<Grid(batch, tokens), kThreadsPerBlock, 0, s>>>(
        tokens, scale, causal, bf16, q, k, v, lse, delta, d_o, dk, dv);
    return cudaGetLastError();
  });
}

}  // namespace strait::site
