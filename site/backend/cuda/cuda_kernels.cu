// The CUDA backend's kernels (cuda_kernels.h): one or two per Backend op that is not a library
// call.
//
// Typed tensors reach the kernels as (pointer, DType) pairs (In / Out below) and every access goes
// through LoadV / StoreV: an element is widened to f32 when it is loaded (exact) and rounded once,
// to nearest even, when it is stored (__float2bfloat16_rn: Bf16Bits' value for every non-NaN
// float). The storage type is a run-time argument, not a template parameter: one uniform branch per
// 16-byte access costs nothing next to the memory traffic, and every mix of input and output types
// works without a kernel per combination.
//
// Vector widths: a kernel moves VEC elements per access (16 bytes: 8 bf16, or 4 floats; 8 floats
// as two float4 when an f32 tensor meets a bf16 one) when every pointer it touches is 16-byte
// aligned and the row widths / strides are multiples of VEC (the launcher checks: PickVec); it
// falls back to VEC = 1 (scalar, any alignment) otherwise.
//
// Determinism: no atomics; every reduction runs in an order fixed by the shapes alone (warp
// shuffles in a fixed tree, column sums per chunk of kColumnChunkRows rows then the chunks in
// order, the embedding gradient's rows in order). Launch shapes depend only on the op's arguments.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <initializer_list>
#include <type_traits>

#include "site/backend/cuda/cuda_kernels.h"
#include "site/backend/op_math.h"

namespace strait::site {
namespace {

constexpr int kThreads = 256;          // threads per block of most kernels
constexpr int kWarps = kThreads / 32;  // rows per block of the warp-per-row kernels
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int64_t kMaxBlocks = 1 << 20;  // grid-stride kernels never need more
constexpr int kRegisterRowMax = 1024;    // row kernels keep rows up to this width in registers
constexpr int kSliceRows = kColumnChunkRows / kWarps;  // rows per warp of a column chunk (32)
static_assert(kColumnChunkRows % kWarps == 0, "a chunk splits evenly over the block's warps");

template <int V>
using IntC = std::integral_constant<int, V>;

// ---------------------------------------------------------------------------------------------
// Typed views.

struct In {
  const void* p;
  DType t;
};
struct Out {
  void* p;
  DType t;
};

In ViewOf(ConstTypedPtr x) { return {x.data(), x.dtype()}; }
Out ViewOf(TypedPtr x) { return {x.data(), x.dtype()}; }
__host__ __device__ inline In Read(Out x) { return {x.p, x.t}; }

bool IsBf16(DType t) { return t == DType::kBf16; }

// The vector width for an op over the given pointers: 8 when a bf16 tensor takes part (16 bytes
// of bf16), else 4; halved to 4 when a width is not a multiple of 8; 1 when a pointer is not
// 16-byte aligned or a width is not a multiple of 4. `multiples` are the row widths and strides
// (in elements) that a vector must not straddle.
int PickVec(bool any_bf16, std::initializer_list<int64_t> multiples,
            std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return 1;
  }
  auto all = [&](int v) {
    for (int64_t m : multiples) {
      if (m % v != 0) return false;
    }
    return true;
  };
  if (any_bf16 && all(8)) return 8;
  if (all(4)) return 4;
  return 1;
}

unsigned GridFor(int64_t items, int per_block = kThreads) {
  int64_t blocks = (items + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

// Calls f(IntC<VEC>) for VEC in {1, 4, 8}.
template <typename F>
cudaError_t ForVec(int vec, F&& f) {
  switch (vec) {
    case 8:
      return f(IntC<8>{});
    case 4:
      return f(IntC<4>{});
    default:
      return f(IntC<1>{});
  }
}

// ---------------------------------------------------------------------------------------------
// Loads and stores of N consecutive elements (N = 1, 4 or 8; the address a multiple of N elements
// from a 16-byte aligned base when N > 1).

__device__ __forceinline__ float Bf16ToFloat(uint32_t bits) { return __uint_as_float(bits << 16); }

__device__ __forceinline__ void Unpack(uint32_t w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}

__device__ __forceinline__ uint32_t Pack(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);  // .x (lo) at the lower address
  uint32_t w;
  memcpy(&w, &h, sizeof w);
  return w;
}

__device__ __forceinline__ uint16_t ToBf16(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

// The value v has once stored in a tensor of type t.
__device__ __forceinline__ float StoredAs(DType t, float v) {
  return t == DType::kF32 ? v : __bfloat162float(__float2bfloat16_rn(v));
}

template <int N>
__device__ __forceinline__ void LoadF32(const float* p, float (&v)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int k = 0; k < N / 4; ++k) {
      const float4 f = reinterpret_cast<const float4*>(p)[k];
      v[4 * k] = f.x;
      v[4 * k + 1] = f.y;
      v[4 * k + 2] = f.z;
      v[4 * k + 3] = f.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = p[k];
  }
}

template <int N>
__device__ __forceinline__ void StoreF32(float* p, const float (&v)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int k = 0; k < N / 4; ++k) {
      reinterpret_cast<float4*>(p)[k] =
          make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = v[k];
  }
}

template <int N>
__device__ __forceinline__ void LoadBf16(const uint16_t* p, float (&v)[N]) {
  if constexpr (N % 8 == 0) {
#pragma unroll
    for (int k = 0; k < N / 8; ++k) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[k];
      Unpack(u.x, v[8 * k], v[8 * k + 1]);
      Unpack(u.y, v[8 * k + 2], v[8 * k + 3]);
      Unpack(u.z, v[8 * k + 4], v[8 * k + 5]);
      Unpack(u.w, v[8 * k + 6], v[8 * k + 7]);
    }
  } else if constexpr (N % 4 == 0) {
#pragma unroll
    for (int k = 0; k < N / 4; ++k) {
      const uint2 u = reinterpret_cast<const uint2*>(p)[k];
      Unpack(u.x, v[4 * k], v[4 * k + 1]);
      Unpack(u.y, v[4 * k + 2], v[4 * k + 3]);
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = Bf16ToFloat(p[k]);
  }
}

template <int N>
__device__ __forceinline__ void StoreBf16(uint16_t* p, const float (&v)[N]) {
  if constexpr (N % 8 == 0) {
#pragma unroll
    for (int k = 0; k < N / 8; ++k) {
      reinterpret_cast<uint4*>(p)[k] =
          make_uint4(Pack(v[8 * k], v[8 * k + 1]), Pack(v[8 * k + 2], v[8 * k + 3]),
                     Pack(v[8 * k + 4], v[8 * k + 5]), Pack(v[8 * k + 6], v[8 * k + 7]));
    }
  } else if constexpr (N % 4 == 0) {
#pragma unroll
    for (int k = 0; k < N / 4; ++k) {
      reinterpret_cast<uint2*>(p)[k] =
          make_uint2(Pack(v[4 * k], v[4 * k + 1]), Pack(v[4 * k + 2], v[4 * k + 3]));
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = ToBf16(v[k]);
  }
}

// Elements [i, i + N) of x, widened to f32.
template <int N>
__device__ __forceinline__ void LoadV(In x, int64_t i, float (&v)[N]) {
  if (x.t == DType::kF32) {
    LoadF32<N>(static_cast<const float*>(x.p) + i, v);
  } else {
    LoadBf16<N>(static_cast<const uint16_t*>(x.p) + i, v);
  }
}

// v into elements [i, i + N) of y, rounded to y's type.
template <int N>
__device__ __forceinline__ void StoreV(Out y, int64_t i, const float (&v)[N]) {
  if (y.t == DType::kF32) {
    StoreF32<N>(static_cast<float*>(y.p) + i, v);
  } else {
    StoreBf16<N>(static_cast<uint16_t*>(y.p) + i, v);
  }
}

__device__ __forceinline__ float Load1(In x, int64_t i) {
  return x.t == DType::kF32 ? static_cast<const float*>(x.p)[i]
                            : Bf16ToFloat(static_cast<const uint16_t*>(x.p)[i]);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

__device__ __forceinline__ float Activation(ActivationOp act, float v) {
  return act == ActivationOp::kRelu   ? (v > 0.0f ? v : 0.0f)
         : act == ActivationOp::kGelu ? Gelu(v)
                                      : v;
}

// dy * act'(x) (Backend::ActivationBackward).
__device__ __forceinline__ float ActivationGrad(ActivationOp act, float x, float dy) {
  return act == ActivationOp::kRelu   ? (x > 0.0f ? dy : 0.0f)
         : act == ActivationOp::kGelu ? dy * GeluGrad(x)
                                      : dy;
}

// ---------------------------------------------------------------------------------------------
// Elementwise ops: a grid-stride loop over groups of VEC elements, then the n % VEC tail one at a
// time. Each op's Apply<N>(i) handles elements [i, i + N).

template <int VEC, typename Op>
__global__ void __launch_bounds__(kThreads) ElementwiseKernel(int64_t n, Op op) {
  const int64_t stride = int64_t{blockDim.x} * gridDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t groups = n / VEC;
  for (int64_t g = first; g < groups; g += stride) op.template Apply<VEC>(g * VEC);
  if constexpr (VEC > 1) {
    for (int64_t i = groups * VEC + first; i < n; i += stride) op.template Apply<1>(i);
  }
}

template <typename Op>
cudaError_t RunElementwise(cudaStream_t s, int64_t n, int vec, const Op& op) {
  if (n <= 0) return cudaSuccess;
  return ForVec(vec, [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    ElementwiseKernel<VEC, Op><<<GridFor((n + VEC - 1) / VEC), kThreads, 0, s>>>(n, op);
    return cudaGetLastError();
  });
}

struct FillOp {
  Out x;
  float value;
  template <int N>
  __device__ void Apply(int64_t i) const {
    float v[N];
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = value;
    StoreV<N>(x, i, v);
  }
};

struct ConvertOp {
  In x;
  Out y;
  template <int N>
  __device__ void Apply(int64_t i) const {
    float v[N];
    LoadV<N>(x, i, v);
    StoreV<N>(y, i, v);
  }
};

// x += bias[column] (stored when there is a bias and y is not x), y = act(x + bias). Like the CPU,
// y is computed from the unrounded sum.
struct BiasActivationOp {
  const float* bias;
  ActivationOp act;
  int cols;
  bool store_x;
  Out x, y;
  template <int N>
  __device__ void Apply(int64_t i) const {
    float v[N];
    LoadV<N>(Read(x), i, v);
    if (bias != nullptr) {
      float b[N];
      LoadF32<N>(bias + i % cols, b);
#pragma unroll
      for (int k = 0; k < N; ++k) v[k] += b[k];
      if (store_x) StoreV<N>(x, i, v);
    }
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = Activation(act, v[k]);
    StoreV<N>(y, i, v);
  }
};

struct ActivationBackwardOp {
  ActivationOp act;
  In x, dy;
  Out dx;
  template <int N>
  __device__ void Apply(int64_t i) const {
    float g[N], xv[N];
    LoadV<N>(dy, i, g);
    if (act != ActivationOp::kNone) {
      LoadV<N>(x, i, xv);
#pragma unroll
      for (int k = 0; k < N; ++k) g[k] = ActivationGrad(act, xv[k], g[k]);
    }
    StoreV<N>(dx, i, g);
  }
};

struct DropoutOp {
  float p;
  uint64_t key;
  int64_t offset;
  In x;
  Out y;
  template <int N>
  __device__ void Apply(int64_t i) const {
    float v[N];
    LoadV<N>(x, i, v);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      v[k] *= DropoutScale(p, key, static_cast<uint64_t>(offset + i + k));
    }
    StoreV<N>(y, i, v);
  }
};

struct AxpyOp {
  float alpha;
  In x;
  Out y;
  template <int N>
  __device__ void Apply(int64_t i) const {
    float xv[N], yv[N];
    LoadV<N>(x, i, xv);
    LoadV<N>(Read(y), i, yv);
#pragma unroll
    for (int k = 0; k < N; ++k) yv[k] += alpha * xv[k];
    StoreV<N>(y, i, yv);
  }
};

// Rounded products and sum, as the CPU backend computes it (nvcc would fuse them otherwise).
struct AxpbyOp {
  float alpha, beta;
  In x;
  Out y;
  template <int N>
  __device__ void Apply(int64_t i) const {
    float xv[N], yv[N];
    LoadV<N>(x, i, xv);
    LoadV<N>(Read(y), i, yv);
#pragma unroll
    for (int k = 0; k < N; ++k) yv[k] = __fadd_rn(__fmul_rn(alpha, xv[k]), __fmul_rn(beta, yv[k]));
    StoreV<N>(y, i, yv);
  }
};

struct SgdOp {
  float lr, momentum, wd, scale;
  float* param;
  const float* grad;
  float* velocity;
  Out copy;  // p == nullptr: none
  template <int N>
  __device__ void Apply(int64_t i) const {
    float p[N], g[N], vel[N];
    LoadF32<N>(param + i, p);
    LoadF32<N>(grad + i, g);
    LoadF32<N>(velocity + i, vel);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float gk = g[k] * scale + wd * p[k];
      vel[k] = momentum * vel[k] + gk;
      p[k] -= lr * vel[k];
    }
    StoreF32<N>(velocity + i, vel);
    StoreF32<N>(param + i, p);
    if (copy.p != nullptr) StoreV<N>(copy, i, p);
  }
};

struct AdamWOp {
  float lr, b1, b2, eps, wd, bias1, bias2, scale;
  float* param;
  const float* grad;
  float* m;
  float* v;
  Out copy;  // p == nullptr: none
  template <int N>
  __device__ void Apply(int64_t i) const {
    float p[N], g[N], mv[N], vv[N];
    LoadF32<N>(param + i, p);
    LoadF32<N>(grad + i, g);
    LoadF32<N>(m + i, mv);
    LoadF32<N>(v + i, vv);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float gk = g[k] * scale;
      mv[k] = b1 * mv[k] + (1.0f - b1) * gk;
      vv[k] = b2 * vv[k] + (1.0f - b2) * gk * gk;
      const float update = (mv[k] / bias1) / (sqrtf(vv[k] / bias2) + eps);
      p[k] -= lr * (update + wd * p[k]);
    }
    StoreF32<N>(m + i, mv);
    StoreF32<N>(v + i, vv);
    StoreF32<N>(param + i, p);
    if (copy.p != nullptr) StoreV<N>(copy, i, p);
  }
};

// ---------------------------------------------------------------------------------------------
// Layout copies: a grid-stride loop over groups of VEC elements of the output (rows of the copy
// are multiples of VEC elements when VEC > 1).

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

template <int VEC>
__global__ void __launch_bounds__(kThreads)
    EmbeddingBackwardKernel(int64_t rows, int dim, int vocab, const float* ids, In dy,
                            float* dtable, int col_groups, int buckets) {
  constexpr int B = kEmbeddingBatch, P = kScanChunks;
  const int lane = threadIdx.x & 31;
  const int64_t w = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  if (w >= int64_t{col_groups} * buckets) return;  // a whole warp
  const int g = static_cast<int>(w % col_groups);
  const int bucket = static_cast<int>(w / col_groups);
  const int c = (g * 32 + lane) * VEC;
  const bool active = c < dim;
  // The scanned segment: rows [seg, seg + 32 * P); seg_ids[q] is this lane's id in chunk q (row
  // seg + 32 * q + lane), masks[q] the warp's rows in chunk q not yet taken. Warp-uniform except
  // seg_ids.
  int64_t seg = 0, next = 0;
  int seg_ids[P];
  unsigned masks[P];
#pragma unroll
  for (int q = 0; q < P; ++q) seg_ids[q] = -1, masks[q] = 0;
  while (true) {
    int rid[B];
    int64_t rr[B];
#pragma unroll
    for (int b = 0; b < B; ++b) {
      unsigned any = 0;
#pragma unroll
      for (int q = 0; q < P; ++q) any |= masks[q];
      while (any == 0 && next < rows) {  // warp-uniform: scan the next segment
        float raw[P];
#pragma unroll
        for (int q = 0; q < P; ++q) {
          const int64_t r = next + 32 * q + lane;
          raw[q] = r < rows ? ids[r] : -1.0f;
        }
#pragma unroll
        for (int q = 0; q < P; ++q) {
          seg_ids[q] = static_cast<int>(TokenId(raw[q], vocab));
          masks[q] = __ballot_sync(kFullMask, seg_ids[q] >= 0 && seg_ids[q] % buckets == bucket);
          any |= masks[q];
        }
        seg = next;
        next += 32 * P;
      }
      rid[b] = -1;
      rr[b] = 0;
      if (any != 0) {
        // The first chunk with a row left, and its first row.
        int sel = -1;
        unsigned m = 0;
#pragma unroll
        for (int q = 0; q < P; ++q) {
          if (sel < 0 && masks[q] != 0) sel = q, m = masks[q];
        }
        const int bit = __ffs(m) - 1;
        int my_id = -1;
#pragma unroll
        for (int q = 0; q < P; ++q) {
          if (q == sel) {
            masks[q] &= masks[q] - 1;
            my_id = seg_ids[q];
          }
        }
        rid[b] = __shfl_sync(kFullMask, my_id, bit);
        rr[b] = seg + 32 * sel + bit;
      }
    }
    if (rid[0] < 0) break;  // the rows are exhausted (rid is -1 from the first empty slot on)
    if (active) {
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
  }
}

// ---------------------------------------------------------------------------------------------
// Row kernels: one warp per row (kWarps rows per block, grid-stride over rows). ITERS > 0: the row
// (dim <= 32 * VEC * ITERS) stays in registers, read once; lane l holds groups l, l + 32, ...
// ITERS == 0: the row streams through again for each pass (wide rows), each lane touching the same
// groups in every pass.

template <typename F>
cudaError_t ForRowShape(int64_t width, int vec, F&& f) {
  if (vec > 1 && width <= kRegisterRowMax) {
    const int64_t need = (width / vec + 31) / 32;
    if (vec == 8) {
      if (need <= 1) return f(IntC<8>{}, IntC<1>{});
      if (need <= 2) return f(IntC<8>{}, IntC<2>{});
      return f(IntC<8>{}, IntC<4>{});
    }
    if (need <= 1) return f(IntC<4>{}, IntC<1>{});
    if (need <= 2) return f(IntC<4>{}, IntC<2>{});
    if (need <= 4) return f(IntC<4>{}, IntC<4>{});
    return f(IntC<4>{}, IntC<8>{});
  }
  return ForVec(vec, [&](auto v) { return f(v, IntC<0>{}); });
}

unsigned RowGrid(int64_t rows) { return GridFor(rows, kWarps); }

#define FOR_EACH_ROW(row)                                                           \
  for (int64_t row = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32; row < a.rows; \
       row += int64_t{gridDim.x} * kWarps)

struct LayerNormArgs {
  int64_t rows;
  int dim;
  In x, branch;  // branch.p != nullptr: r = x + branch (stored in r's type), then LayerNorm of r
  Out r;
  const float* gamma;
  const float* beta;
  Out y;
  float* mean;
  float* rstd;
};

// x's (or the stored residual sum's) elements [i, i + VEC).
template <int VEC>
__device__ __forceinline__ void LayerNormInput(const LayerNormArgs& a, int64_t i, float (&v)[VEC]) {
  LoadV<VEC>(a.x, i, v);
  if (a.branch.p != nullptr) {
    float b[VEC];
    LoadV<VEC>(a.branch, i, b);
#pragma unroll
    for (int k = 0; k < VEC; ++k) v[k] = StoredAs(a.r.t, v[k] + b[k]);
    StoreV<VEC>(a.r, i, v);
  }
}

template <int VEC>
__device__ __forceinline__ void LayerNormOutput(const LayerNormArgs& a, int64_t base, int c,
                                                float mu, float rs, const float (&v)[VEC]) {
  float g[VEC], b[VEC], out[VEC];
  LoadF32<VEC>(a.gamma + c, g);
  LoadF32<VEC>(a.beta + c, b);
#pragma unroll
  for (int k = 0; k < VEC; ++k) out[k] = (v[k] - mu) * rs * g[k] + b[k];
  StoreV<VEC>(a.y, base + c, out);
}

template <int VEC, int ITERS>
__global__ void __launch_bounds__(kThreads) LayerNormForwardKernel(LayerNormArgs a) {
  const int lane = threadIdx.x & 31;
  const int groups = a.dim / VEC;
  FOR_EACH_ROW(row) {
    const int64_t base = row * a.dim;
    float mu, rs;
    if constexpr (ITERS > 0) {
      float v[ITERS][VEC];
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < ITERS; ++k) {
        const int g = lane + 32 * k;
        if (g < groups) {
          LayerNormInput<VEC>(a, base + g * VEC, v[k]);
#pragma unroll
          for (int e = 0; e < VEC; ++e) sum += v[k][e];
        }
      }
      mu = WarpSum(sum) / a.dim;
      float var = 0.0f;
#pragma unroll
      for (int k = 0; k < ITERS; ++k) {
        if (lane + 32 * k < groups) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) var += (v[k][e] - mu) * (v[k][e] - mu);
        }
      }
      rs = 1.0f / sqrtf(WarpSum(var) / a.dim + kLayerNormEps);
#pragma unroll
      for (int k = 0; k < ITERS; ++k) {
        const int g = lane + 32 * k;
        if (g < groups) LayerNormOutput<VEC>(a, base, g * VEC, mu, rs, v[k]);
      }
    } else {
      // The residual sum is stored by the first pass; the later passes read it back (this lane's
      // own stores) instead of x.
      const In src = a.branch.p != nullptr ? Read(a.r) : a.x;
      float sum = 0.0f;
      for (int g = lane; g < groups; g += 32) {
        float v[VEC];
        LayerNormInput<VEC>(a, base + g * VEC, v);
#pragma unroll
        for (int e = 0; e < VEC; ++e) sum += v[e];
      }
      mu = WarpSum(sum) / a.dim;
      float var = 0.0f;
      for (int g = lane; g < groups; g += 32) {
        float v[VEC];
        LoadV<VEC>(src, base + g * VEC, v);
#pragma unroll
        for (int e = 0; e < VEC; ++e) var += (v[e] - mu) * (v[e] - mu);
      }
      rs = 1.0f / sqrtf(WarpSum(var) / a.dim + kLayerNormEps);
      for (int g = lane; g < groups; g += 32) {
        float v[VEC];
        LoadV<VEC>(src, base + g * VEC, v);
        LayerNormOutput<VEC>(a, base, g * VEC, mu, rs, v);
      }
    }
    if (lane == 0) {
      a.mean[row] = mu;
      a.rstd[row] = rs;
    }
  }
}

struct LayerNormBackwardArgs {
  int64_t rows;
  int dim;
  In x;
  const float* gamma;
  const float* mean;
  const float* rstd;
  In dy;
  Out dx;
};

// dx += (dy * gamma - mean(dy * gamma) - norm * mean(dy * gamma * norm)) * rstd, norm = (x - mu)
// * rstd: the CPU's expression.
template <int VEC>
__device__ __forceinline__ void LayerNormDx(const LayerNormBackwardArgs& a, int64_t base, int c,
                                            float mu, float rs, float dnorm_mean,
                                            float dnorm_norm_mean, const float (&x)[VEC],
                                            const float (&dy)[VEC]) {
  float g[VEC], dx[VEC];
  LoadF32<VEC>(a.gamma + c, g);
  LoadV<VEC>(Read(a.dx), base + c, dx);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float norm = (x[k] - mu) * rs;
    dx[k] += (dy[k] * g[k] - dnorm_mean - norm * dnorm_norm_mean) * rs;
  }
  StoreV<VEC>(a.dx, base + c, dx);
}

template <int VEC>
__device__ __forceinline__ void LayerNormDxSums(const LayerNormBackwardArgs& a, int c, float mu,
                                                float rs, const float (&x)[VEC],
                                                const float (&dy)[VEC], float& s1, float& s2) {
  float g[VEC];
  LoadF32<VEC>(a.gamma + c, g);
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    const float dnorm = dy[k] * g[k];
    s1 += dnorm;
    s2 += dnorm * (x[k] - mu) * rs;
  }
}

template <int VEC, int ITERS>
__global__ void __launch_bounds__(kThreads) LayerNormBackwardDxKernel(LayerNormBackwardArgs a) {
  const int lane = threadIdx.x & 31;
  const int groups = a.dim / VEC;
  FOR_EACH_ROW(row) {
    const int64_t base = row * a.dim;
    const float mu = a.mean[row], rs = a.rstd[row];
    float s1 = 0.0f, s2 = 0.0f;
    if constexpr (ITERS > 0) {
      float xv[ITERS][VEC], dyv[ITERS][VEC];
#pragma unroll
      for (int k = 0; k < ITERS; ++k) {
        const int g = lane + 32 * k;
        if (g < groups) {
          LoadV<VEC>(a.x, base + g * VEC, xv[k]);
          LoadV<VEC>(a.dy, base + g * VEC, dyv[k]);
          LayerNormDxSums<VEC>(a, g * VEC, mu, rs, xv[k], dyv[k], s1, s2);
        }
      }
      const float dnorm_mean = WarpSum(s1) / a.dim, dnorm_norm_mean = WarpSum(s2) / a.dim;
#pragma unroll
      for (int k = 0; k < ITERS; ++k) {
        const int g = lane + 32 * k;
        if (g < groups) {
          LayerNormDx<VEC>(a, base, g * VEC, mu, rs, dnorm_mean, dnorm_norm_mean, xv[k], dyv[k]);
        }
      }
    } else {
      for (int g = lane; g < groups; g += 32) {
        float xv[VEC], dyv[VEC];
        LoadV<VEC>(a.x, base + g * VEC, xv);
        LoadV<VEC>(a.dy, base + g * VEC, dyv);
        LayerNormDxSums<VEC>(a, g * VEC, mu, rs, xv, dyv, s1, s2);
      }
      const float dnorm_mean = WarpSum(s1) / a.dim, dnorm_norm_mean = WarpSum(s2) / a.dim;
      for (int g = lane; g < groups; g += 32) {
        float xv[VEC], dyv[VEC];
        LoadV<VEC>(a.x, base + g * VEC, xv);
        LoadV<VEC>(a.dy, base + g * VEC, dyv);
        LayerNormDx<VEC>(a, base, g * VEC, mu, rs, dnorm_mean, dnorm_norm_mean, xv, dyv);
      }
    }
  }
}

struct SoftmaxArgs {
  int64_t rows;
  int cols;
  float scale;
  bool causal;
  In x;
  Out y;
};

// y = softmax(scale * x) over the row's first `valid` columns, 0 after them.
template <int VEC, int ITERS>
__global__ void __launch_bounds__(kThreads) SoftmaxRowsKernel(SoftmaxArgs a) {
  const int lane = threadIdx.x & 31;
  const int groups = a.cols / VEC;
  FOR_EACH_ROW(row) {
    const int64_t base = row * a.cols;
    const int valid = a.causal ? static_cast<int>(row % a.cols) + 1 : a.cols;
    if constexpr (ITERS > 0) {
      float v[ITERS][VEC];
      float mx = -INFINITY;
#pragma unroll
      for (int k = 0; k < ITERS; ++k) {
        const int g = lane + 32 * k;
        if (g < groups) {
          LoadV<VEC>(a.x, base + g * VEC, v[k]);
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            v[k][e] *= a.scale;
            if (g * VEC + e < valid) mx = fmaxf(mx, v[k][e]);
          }
        }
      }
      mx = WarpMax(mx);
      float sum = 0.0f;
#pragma unroll
      for (int k = 0; k < ITERS; ++k) {
        const int g = lane + 32 * k;
        if (g < groups) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) {
            v[k][e] = g * VEC + e < valid ? expf(v[k][e] - mx) : 0.0f;
            sum += v[k][e];
          }
        }
      }
      const float inv = 1.0f / WarpSum(sum);
#pragma unroll
      for (int k = 0; k < ITERS; ++k) {
        const int g = lane + 32 * k;
        if (g < groups) {
#pragma unroll
          for (int e = 0; e < VEC; ++e) v[k][e] *= inv;
          StoreV<VEC>(a.y, base + g * VEC, v[k]);
        }
      }
    } else {
      // Only the valid columns are read: the later ones are written 0.
      const int read_groups = (valid + VEC - 1) / VEC;
      float mx = -INFINITY;
      for (int g = lane; g < read_groups; g += 32) {
        float v[VEC];
        LoadV<VEC>(a.x, base + g * VEC, v);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          if (g * VEC + e < valid) mx = fmaxf(mx, a.scale * v[e]);
        }
      }
      mx = WarpMax(mx);
      float sum = 0.0f;
      for (int g = lane; g < read_groups; g += 32) {
        float v[VEC];
        LoadV<VEC>(a.x, base + g * VEC, v);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          if (g * VEC + e < valid) sum += expf(a.scale * v[e] - mx);
        }
      }
      const float inv = 1.0f / WarpSum(sum);
      for (int g = lane; g < groups; g += 32) {
        float v[VEC] = {};
        if (g < read_groups) LoadV<VEC>(a.x, base + g * VEC, v);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          v[e] = g * VEC + e < valid ? expf(a.scale * v[e] - mx) * inv : 0.0f;
        }
        StoreV<VEC>(a.y, base + g * VEC, v);
      }
    }
  }
}

struct SoftmaxBackwardArgs {
  int64_t rows;
  int cols;
  float scale;
  In y, dy;
  Out dx;
};

template <int VEC>
__device__ __forceinline__ void SoftmaxDx(const SoftmaxBackwardArgs& a, int64_t i, float dot,
                                          const float (&y)[VEC], const float (&dy)[VEC]) {
  float dx[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) dx[k] = a.scale * y[k] * (dy[k] - dot);
  StoreV<VEC>(a.dx, i, dx);
}

template <int VEC, int ITERS>
__global__ void __launch_bounds__(kThreads) SoftmaxRowsBackwardKernel(SoftmaxBackwardArgs a) {
  const int lane = threadIdx.x & 31;
  const int groups = a.cols / VEC;
  FOR_EACH_ROW(row) {
    const int64_t base = row * a.cols;
    float dot = 0.0f;
    if constexpr (ITERS > 0) {
      float yv[ITERS][VEC], dyv[ITERS][VEC];
#pragma unroll
      for (int k = 0; k < ITERS; ++k) {
        const int g = lane + 32 * k;
        if (g < groups) {
          LoadV<VEC>(a.y, base + g * VEC, yv[k]);
          LoadV<VEC>(a.dy, base + g * VEC, dyv[k]);
#pragma unroll
          for (int e = 0; e < VEC; ++e) dot += dyv[k][e] * yv[k][e];
        }
      }
      dot = WarpSum(dot);
#pragma unroll
      for (int k = 0; k < ITERS; ++k) {
        const int g = lane + 32 * k;
        if (g < groups) SoftmaxDx<VEC>(a, base + g * VEC, dot, yv[k], dyv[k]);
      }
    } else {
      for (int g = lane; g < groups; g += 32) {
        float yv[VEC], dyv[VEC];
        LoadV<VEC>(a.y, base + g * VEC, yv);
        LoadV<VEC>(a.dy, base + g * VEC, dyv);
#pragma unroll
        for (int e = 0; e < VEC; ++e) dot += dyv[e] * yv[e];
      }
      dot = WarpSum(dot);
      for (int g = lane; g < groups; g += 32) {
        float yv[VEC], dyv[VEC];
        LoadV<VEC>(a.y, base + g * VEC, yv);
        LoadV<VEC>(a.dy, base + g * VEC, dyv);
        SoftmaxDx<VEC>(a, base + g * VEC, dot, yv, dyv);
      }
    }
  }
}

#undef FOR_EACH_ROW

// ---------------------------------------------------------------------------------------------
// The classifier: a block per row (grid-stride over rows). Pass 1: each thread keeps an online
// maximum and sum of exp (rescaled when its maximum grows) and its first maximal logit; the block
// combines them in a fixed tree. Pass 2: the gradient over the logits.

constexpr int kClassifierMaxThreads = 512;

struct RowStat {
  float m;     // running maximum (-inf: none yet)
  float s;     // sum of exp(x - m)
  float best;  // the first maximal logit seen and its column (-1: none)
  int idx;
};

// s * exp(from - to), exact when nothing moves (and 0 stays 0).
__device__ __forceinline__ float Rescale(float s, float from, float to) {
  return s == 0.0f || from == to ? s : s * expf(from - to);
}

__device__ __forceinline__ void Accumulate(RowStat& st, float x, int c) {
  if (x > st.m) {
    st.s = Rescale(st.s, st.m, x) + 1.0f;
    st.m = x;
  } else if (x != -INFINITY) {
    st.s += expf(x - st.m);  // NaN propagates
  }
  if (st.idx < 0 || x > st.best) {  // columns arrive in increasing order per thread
    st.best = x;
    st.idx = c;
  }
}

__device__ __forceinline__ RowStat Combine(const RowStat& a, const RowStat& b) {
  RowStat r;
  r.m = fmaxf(a.m, b.m);
  r.s = Rescale(a.s, a.m, r.m) + Rescale(b.s, b.m, r.m);
  const bool take_b =
      a.idx < 0 || (b.idx >= 0 && (b.best > a.best || (b.best == a.best && b.idx < a.idx)));
  r.best = take_b ? b.best : a.best;
  r.idx = take_b ? b.idx : a.idx;
  return r;
}

__device__ __forceinline__ RowStat ShuffleDown(const RowStat& a, int offset) {
  return {__shfl_down_sync(kFullMask, a.m, offset), __shfl_down_sync(kFullMask, a.s, offset),
          __shfl_down_sync(kFullMask, a.best, offset), __shfl_down_sync(kFullMask, a.idx, offset)};
}

// The block's combined stat, in every thread. blockDim.x is a multiple of 32 up to 512.
__device__ RowStat BlockCombine(RowStat st, RowStat* warp_stats) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) st = Combine(st, ShuffleDown(st, offset));
  if (lane == 0) warp_stats[warp] = st;
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x >> 5;
    st = lane < warps ? warp_stats[lane] : RowStat{-INFINITY, 0.0f, -INFINITY, -1};
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) st = Combine(st, ShuffleDown(st, offset));
    if (lane == 0) warp_stats[kClassifierMaxThreads / 32] = st;
  }
  __syncthreads();
  return warp_stats[kClassifierMaxThreads / 32];
}

template <int VEC>
__global__ void __launch_bounds__(kClassifierMaxThreads)
    ClassifierLossKernel(int64_t rows, int classes, Out logits, const int32_t* labels,
                         float grad_scale, float* loss, int32_t* correct) {
  __shared__ RowStat warp_stats[kClassifierMaxThreads / 32 + 1];
  const int groups = classes / VEC;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * classes;
    const int32_t label = labels[row];
    if (label < 0 || label >= classes) {  // the whole block
      for (int g = threadIdx.x; g < groups; g += blockDim.x) {
        float z[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) z[e] = 0.0f;
        StoreV<VEC>(logits, base + g * VEC, z);
      }
      if (threadIdx.x == 0) {
        loss[row] = 0.0f;
        correct[row] = 0;
      }
      continue;
    }
    // Read before any thread writes the row (after BlockCombine's barriers).
    const float label_logit = threadIdx.x == 0 ? Load1(Read(logits), base + label) : 0.0f;
    RowStat st{-INFINITY, 0.0f, -INFINITY, -1};
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
      float v[VEC];
      LoadV<VEC>(Read(logits), base + g * VEC, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) Accumulate(st, v[e], g * VEC + e);
    }
    st = BlockCombine(st, warp_stats);
    const float mx = st.m, inv = 1.0f / st.s;
    if (threadIdx.x == 0) {
      loss[row] = logf(st.s) + mx - label_logit;
      correct[row] = st.idx == label ? 1 : 0;
    }
    for (int g = threadIdx.x; g < groups; g += blockDim.x) {
      float v[VEC];
      LoadV<VEC>(Read(logits), base + g * VEC, v);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        v[e] = (expf(v[e] - mx) * inv - (g * VEC + e == label ? 1.0f : 0.0f)) * grad_scale;
      }
      StoreV<VEC>(logits, base + g * VEC, v);
    }
    __syncthreads();  // warp_stats is reused by the next row
  }
}

// ---------------------------------------------------------------------------------------------
// Column reductions (ColumnSum, LayerNorm's dgamma / dbeta, the epilogue's bias gradient): block
// (chunk, column tile) sums rows [chunk * 256, chunk * 256 + 256) of 32 * VEC columns. Warp w
// sums rows w * 32 ... w * 32 + 31 of the chunk in order (a lane VEC columns), then the 8 warps'
// sums are added in warp order: the chunk's partial. With one chunk the partial goes straight to
// the output; otherwise partials [chunks, cols] (one array per sum) and ColumnFinishKernel adds
// the chunks in order. out = (beta == 0 ? 0 : beta * out) + total (beta 1: accumulate).

struct ColumnOutputs {
  float* partial[2];
  float* out[2];
  float beta;
  bool direct;  // one chunk: no partials
};

// (Selects rather than indexes the arrays: a run-time index would put them in local memory.)
__device__ __forceinline__ float* PartialOf(const ColumnOutputs& o, int s) {
  return s == 0 ? o.partial[0] : o.partial[1];
}

__device__ __forceinline__ void StoreColumnTotal(const ColumnOutputs& o, int s, int c,
                                                 float total) {
  float* out = s == 0 ? o.out[0] : o.out[1];
  out[c] = (o.beta == 0.0f ? 0.0f : o.beta * out[c]) + total;
}

template <int VEC, typename Op>
__global__ void __launch_bounds__(kThreads)
    ColumnChunkKernel(int64_t rows, int cols, int tiles, Op op, ColumnOutputs o) {
  constexpr int S = Op::kSums;
  constexpr int kTileCols = 32 * VEC;
  __shared__ __align__(16) float sums[S][kWarps][kTileCols];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t chunk = blockIdx.x / tiles;
  const int tile = static_cast<int>(blockIdx.x - chunk * tiles);
  const int c = tile * kTileCols + lane * VEC;
  float acc[S][VEC];
#pragma unroll
  for (int s = 0; s < S; ++s) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[s][e] = 0.0f;
  }
  if (c < cols) {
    const int64_t r0 = chunk * kColumnChunkRows + warp * kSliceRows;
    const int64_t r1 = r0 + kSliceRows < rows ? r0 + kSliceRows : rows;
    for (int64_t r = r0; r < r1; ++r) op.template Row<VEC>(r, c, acc);
  }
#pragma unroll
  for (int s = 0; s < S; ++s) {
#pragma unroll
    for (int e = 0; e < VEC; ++e) sums[s][warp][lane * VEC + e] = acc[s][e];
  }
  __syncthreads();
  for (int item = threadIdx.x; item < S * kTileCols; item += kThreads) {
    const int s = item / kTileCols, col = item % kTileCols;
    const int cc = tile * kTileCols + col;
    if (cc >= cols) continue;
    float total = sums[s][0][col];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) total += sums[s][w][col];
    if (o.direct) {
      StoreColumnTotal(o, s, cc, total);
    } else {
      PartialOf(o, s)[chunk * cols + cc] = total;
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    ColumnFinishKernel(int sums, int cols, int64_t chunks, ColumnOutputs o) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < int64_t{sums} * cols;
       i += int64_t{blockDim.x} * gridDim.x) {
    const int s = static_cast<int>(i / cols), c = static_cast<int>(i % cols);
    const float* p = PartialOf(o, s) + c;
    float total = p[0];
#pragma unroll 8
    for (int64_t k = 1; k < chunks; ++k) total += p[k * cols];
    StoreColumnTotal(o, s, c, total);
  }
}

// Queues the chunk kernel (and the finish when there is more than one chunk). `partials` holds
// Op::kSums arrays of PartialFloats(rows, cols) floats, one after the other.
template <typename Op>
cudaError_t RunColumnReduction(cudaStream_t s, int64_t rows, int cols, int vec, const Op& op,
                               float* out0, float* out1, float beta, float* partials) {
  const int64_t chunks = (rows + kColumnChunkRows - 1) / kColumnChunkRows;
  if (chunks > 1 && partials == nullptr) return cudaErrorInvalidValue;
  ColumnOutputs o{};
  o.out[0] = out0;
  o.out[1] = out1;
  o.beta = beta;
  o.direct = chunks == 1;
  o.partial[0] = partials;
  o.partial[1] = partials != nullptr ? partials + chunks * cols : nullptr;
  const cudaError_t e = ForVec(vec, [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    const int tiles = (cols + 32 * VEC - 1) / (32 * VEC);
    const int64_t blocks = chunks * tiles;
    if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
    ColumnChunkKernel<VEC, Op>
        <<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(rows, cols, tiles, op, o);
    return cudaGetLastError();
  });
  if (e != cudaSuccess || o.direct) return e;
  ColumnFinishKernel<<<GridFor(int64_t{Op::kSums} * cols), kThreads, 0, s>>>(Op::kSums, cols,
                                                                             chunks, o);
  return cudaGetLastError();
}

// ColumnSum over no rows.
struct ScaleColumnsOp {
  float beta;
  float* out;
  template <int N>
  __device__ void Apply(int64_t i) const {
#pragma unroll
    for (int k = 0; k < N; ++k) out[i + k] = (beta == 0.0f ? 0.0f : beta * out[i + k]) + 0.0f;
  }
};

struct ColumnSumOp {
  static constexpr int kSums = 1;
  In x;
  int64_t ldx;
  template <int N>
  __device__ void Row(int64_t r, int c, float (&acc)[kSums][N]) const {
    float v[N];
    LoadV<N>(x, r * ldx + c, v);
#pragma unroll
    for (int e = 0; e < N; ++e) acc[0][e] += v[e];
  }
};

// dgamma += sum of (x - mean) * rstd * dy, dbeta += sum of dy.
struct LayerNormParamsOp {
  static constexpr int kSums = 2;
  In x, dy;
  const float* mean;
  const float* rstd;
  int dim;
  template <int N>
  __device__ void Row(int64_t r, int c, float (&acc)[kSums][N]) const {
    float xv[N], dyv[N];
    LoadV<N>(x, r * dim + c, xv);
    LoadV<N>(dy, r * dim + c, dyv);
    const float mu = mean[r], rs = rstd[r];
#pragma unroll
    for (int e = 0; e < N; ++e) {
      acc[0][e] += (xv[e] - mu) * rs * dyv[e];
      acc[1][e] += dyv[e];
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The GEMM epilogue on the f32 product t [m, n] (packed): v = t (+ bias); pre = v; v = act(v);
// v = v * act'(act_input) (grad_of); c = v. bias_grad sums the f32 v.

struct EpilogueArgs {
  const float* t;
  int n;
  int64_t ldc;
  const float* bias;
  ActivationOp act;
  Out pre;  // p == nullptr: none
  ActivationOp grad_of;
  In act_input;
  Out c;
};

template <int N>
__device__ __forceinline__ void EpilogueValues(const EpilogueArgs& a, int64_t r, int col,
                                               float (&v)[N]) {
  LoadF32<N>(a.t + r * a.n + col, v);
  const int64_t ci = r * a.ldc + col;
  if (a.bias != nullptr) {
    float b[N];
    LoadF32<N>(a.bias + col, b);
#pragma unroll
    for (int e = 0; e < N; ++e) v[e] += b[e];
  }
  if (a.pre.p != nullptr) StoreV<N>(a.pre, ci, v);
  if (a.act != ActivationOp::kNone) {
#pragma unroll
    for (int e = 0; e < N; ++e) v[e] = Activation(a.act, v[e]);
  }
  if (a.grad_of != ActivationOp::kNone) {
    float x[N];
    LoadV<N>(a.act_input, ci, x);
#pragma unroll
    for (int e = 0; e < N; ++e) v[e] = ActivationGrad(a.grad_of, x[e], v[e]);
  }
  StoreV<N>(a.c, ci, v);
}

template <int VEC>
__global__ void __launch_bounds__(kThreads) GemmEpilogueKernel(int64_t m, EpilogueArgs a) {
  const int per_row = a.n / VEC;
  const int64_t total = m * per_row;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{blockDim.x} * gridDim.x) {
    const int64_t r = i / per_row;
    const int col = static_cast<int>(i - r * per_row) * VEC;
    float v[VEC];
    EpilogueValues<VEC>(a, r, col, v);
  }
}

struct EpilogueBiasGradOp {
  static constexpr int kSums = 1;
  EpilogueArgs a;
  template <int N>
  __device__ void Row(int64_t r, int c, float (&acc)[kSums][N]) const {
    float v[N];
    EpilogueValues<N>(a, r, c, v);
#pragma unroll
    for (int e = 0; e < N; ++e) acc[0][e] += v[e];
  }
};

// ---------------------------------------------------------------------------------------------
// Sum of squares: a fixed grid of kSumSquaresBlocks x kThreads partial sums combined in a fixed
// tree order, then one block combines the partials.

__device__ void BlockTreeSum(double* shared) {
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    __syncthreads();
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads)
    SumSquaresPartialKernel(int64_t n, const float* x, double* partial) {
  __shared__ double shared[kThreads];
  double s = 0.0;
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{kThreads} * kSumSquaresBlocks) {
    s += static_cast<double>(x[i]) * x[i];
  }
  shared[threadIdx.x] = s;
  BlockTreeSum(shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = shared[0];
}

__global__ void __launch_bounds__(kSumSquaresBlocks) SumPartialsKernel(double* partial) {
  __shared__ double shared[kSumSquaresBlocks];
  shared[threadIdx.x] = partial[threadIdx.x];
  BlockTreeSum(shared);
  if (threadIdx.x == 0) partial[0] = shared[0];
}

}  // namespace

// =============================================================================================
// Launchers.

cudaError_t LaunchFill(cudaStream_t s, TypedPtr x, int64_t n, float value) {
  if (n <= 0) return cudaSuccess;
  const int vec = PickVec(!x.is_f32(), {}, {x.data()});
  return RunElementwise(s, n, vec, FillOp{ViewOf(x), value});
}

cudaError_t LaunchConvert(cudaStream_t s, int64_t n, ConstTypedPtr x, TypedPtr y) {
  if (n <= 0) return cudaSuccess;
  if (x.dtype() == y.dtype() && x.data() == y.data()) return cudaSuccess;
  const int vec = PickVec(!x.is_f32() || !y.is_f32(), {}, {x.data(), y.data()});
  return RunElementwise(s, n, vec, ConvertOp{ViewOf(x), ViewOf(y)});
}

cudaError_t LaunchGemmEpilogue(cudaStream_t s, int m, int n, const float* t, int ldc,
                               const GemmEpilogue& e, TypedPtr c, float* partials) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  EpilogueArgs a{};
  a.t = t;
  a.n = n;
  a.ldc = ldc;
  a.bias = e.bias;
  a.act = e.act;
  a.pre = ViewOf(e.pre);
  a.grad_of = e.grad_of;
  a.act_input = ViewOf(e.act_input);
  a.c = ViewOf(c);
  if (a.grad_of != ActivationOp::kNone && a.act_input.p == nullptr) return cudaErrorInvalidValue;
  const bool any_bf16 =
      !c.is_f32() || (e.pre && !e.pre.is_f32()) || (e.act_input && !e.act_input.is_f32());
  const int vec =
      PickVec(any_bf16, {n, ldc}, {t, e.bias, e.pre.data(), e.act_input.data(), c.data()});
  if (e.bias_grad != nullptr) {
    return RunColumnReduction(s, m, n, vec, EpilogueBiasGradOp{a}, e.bias_grad, nullptr, 1.0f,
                              partials);
  }
  return ForVec(vec, [&](auto v) {
    constexpr int VEC = decltype(v)::value;
    GemmEpilogueKernel<VEC><<<GridFor(int64_t{m} * (n / VEC)), kThreads, 0, s>>>(m, a);
    return cudaGetLastError();
  });
}

cudaError_t LaunchBiasActivation(cudaStream_t s, int64_t rows, int cols, const float* bias,
                                 ActivationOp act, TypedPtr x, TypedPtr y) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const bool same = x.data() == y.data();
  if (same && bias == nullptr && act == ActivationOp::kNone) return cudaSuccess;
  const int vec = PickVec(!x.is_f32() || !y.is_f32(), {cols}, {x.data(), y.data(), bias});
  BiasActivationOp op{bias, act, cols, bias != nullptr && !same, ViewOf(x), ViewOf(y)};
  return RunElementwise(s, rows * cols, vec, op);
}

cudaError_t LaunchActivationBackward(cudaStream_t s, int64_t n, ActivationOp act, ConstTypedPtr x,
                                     ConstTypedPtr dy, TypedPtr dx) {
  if (n <= 0) return cudaSuccess;
  if (act == ActivationOp::kNone && dy.data() == dx.data() && dy.dtype() == dx.dtype()) {
    return cudaSuccess;
  }
  const bool uses_x = act != ActivationOp::kNone;
  const int vec = PickVec(!dy.is_f32() || !dx.is_f32() || (uses_x && !x.is_f32()), {},
                          {uses_x ? x.data() : nullptr, dy.data(), dx.data()});
  return RunElementwise(s, n, vec, ActivationBackwardOp{act, ViewOf(x), ViewOf(dy), ViewOf(dx)});
}

cudaError_t LaunchColumnSum(cudaStream_t s, int64_t rows, int cols, ConstTypedPtr x, int64_t ldx,
                            float beta, float* out, float* partials) {
  if (cols <= 0) return cudaSuccess;
  if (rows <= 0) {  // an empty sum: out = (beta == 0 ? 0 : beta * out) + 0
    return RunElementwise(s, cols, 1, ScaleColumnsOp{beta, out});
  }
  const int vec = PickVec(!x.is_f32(), {cols, ldx}, {x.data()});
  return RunColumnReduction(s, rows, cols, vec, ColumnSumOp{ViewOf(x), ldx}, out, nullptr, beta,
                            partials);
}

cudaError_t LaunchLayerNormForward(cudaStream_t s, int64_t rows, int dim, ConstTypedPtr x,
                                   const float* gamma, const float* beta, TypedPtr y, float* mean,
                                   float* rstd) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  LayerNormArgs a{
      rows,      dim,  ViewOf(x), In{nullptr, DType::kF32}, Out{nullptr, DType::kF32}, gamma, beta,
      ViewOf(y), mean, rstd};
  const int vec = PickVec(!x.is_f32() || !y.is_f32(), {dim}, {x.data(), y.data(), gamma, beta});
  return ForRowShape(dim, vec, [&](auto v, auto iters) {
    LayerNormForwardKernel<decltype(v)::value, decltype(iters)::value>
        <<<RowGrid(rows), kThreads, 0, s>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t LaunchResidualLayerNormForward(cudaStream_t s, int64_t rows, int dim, ConstTypedPtr x,
                                           ConstTypedPtr branch, TypedPtr r, const float* gamma,
                                           const float* beta, TypedPtr y, float* mean,
                                           float* rstd) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  if (!branch) return cudaErrorInvalidValue;
  LayerNormArgs a{rows,  dim,  ViewOf(x), ViewOf(branch), ViewOf(r),
                  gamma, beta, ViewOf(y), mean,           rstd};
  const bool any_bf16 = !x.is_f32() || !branch.is_f32() || !r.is_f32() || !y.is_f32();
  const int vec =
      PickVec(any_bf16, {dim}, {x.data(), branch.data(), r.data(), y.data(), gamma, beta});
  return ForRowShape(dim, vec, [&](auto v, auto iters) {
    LayerNormForwardKernel<decltype(v)::value, decltype(iters)::value>
        <<<RowGrid(rows), kThreads, 0, s>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t LaunchLayerNormBackward(cudaStream_t s, int64_t rows, int dim, ConstTypedPtr x,
                                    const float* gamma, const float* mean, const float* rstd,
                                    ConstTypedPtr dy, TypedPtr dx, float* dgamma, float* dbeta,
                                    float* partials) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  LayerNormBackwardArgs a{rows, dim, ViewOf(x), gamma, mean, rstd, ViewOf(dy), ViewOf(dx)};
  const bool any_bf16 = !x.is_f32() || !dy.is_f32() || !dx.is_f32();
  const int vec = PickVec(any_bf16, {dim}, {x.data(), dy.data(), dx.data(), gamma});
  cudaError_t e = ForRowShape(dim, vec, [&](auto v, auto iters) {
    LayerNormBackwardDxKernel<decltype(v)::value, decltype(iters)::value>
        <<<RowGrid(rows), kThreads, 0, s>>>(a);
    return cudaGetLastError();
  });
  if (e != cudaSuccess) return e;
  const int pvec = PickVec(!x.is_f32() || !dy.is_f32(), {dim}, {x.data(), dy.data()});
  return RunColumnReduction(s, rows, dim, pvec,
                            LayerNormParamsOp{ViewOf(x), ViewOf(dy), mean, rstd, dim}, dgamma,
                            dbeta, 1.0f, partials);
}

cudaError_t LaunchSoftmaxRows(cudaStream_t s, int64_t rows, int cols, float scale, bool causal,
                              ConstTypedPtr x, TypedPtr y) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  SoftmaxArgs a{rows, cols, scale, causal, ViewOf(x), ViewOf(y)};
  const int vec = PickVec(!x.is_f32() || !y.is_f32(), {cols}, {x.data(), y.data()});
  return ForRowShape(cols, vec, [&](auto v, auto iters) {
    SoftmaxRowsKernel<decltype(v)::value, decltype(iters)::value>
        <<<RowGrid(rows), kThreads, 0, s>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t LaunchSoftmaxRowsBackward(cudaStream_t s, int64_t rows, int cols, float scale,
                                      ConstTypedPtr y, ConstTypedPtr dy, TypedPtr dx) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  SoftmaxBackwardArgs a{rows, cols, scale, ViewOf(y), ViewOf(dy), ViewOf(dx)};
  const bool any_bf16 = !y.is_f32() || !dy.is_f32() || !dx.is_f32();
  const int vec = PickVec(any_bf16, {cols}, {y.data(), dy.data(), dx.data()});
  return ForRowShape(cols, vec, [&](auto v, auto iters) {
    SoftmaxRowsBackwardKernel<decltype(v)::value, decltype(iters)::value>
        <<<RowGrid(rows), kThreads, 0, s>>>(a);
    return cudaGetLastError();
  });
}

cudaError_t LaunchClassifierLoss(cudaStream_t s, int64_t rows, int classes, TypedPtr logits,
                                 const int32_t* labels, float grad_scale, float* loss,
                                 int32_t* correct) {
  if (rows <= 0 || classes <= 0) return cudaSuccess;
  const int vec = PickVec(!logits.is_f32(), {classes}, {logits.data()});
  // About four vectors per thread, 32 to 512 threads: a function of the shape only.
  int threads = 32;
  while (threads < kClassifierMaxThreads && int64_t{threads} * vec * 4 < classes) threads *= 2;
  const unsigned blocks = static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
  return ForVec(vec, [&](auto v) {
    ClassifierLossKernel<decltype(v)::value><<<blocks, threads, 0, s>>>(
        rows, classes, ViewOf(logits), labels, grad_scale, loss, correct);
    return cudaGetLastError();
  });
}

cudaError_t LaunchDropout(cudaStream_t s, int64_t n, float p, uint64_t key, int64_t offset,
                          ConstTypedPtr x, TypedPtr y) {
  if (n <= 0) return cudaSuccess;
  const int vec = PickVec(!x.is_f32() || !y.is_f32(), {}, {x.data(), y.data()});
  return RunElementwise(s, n, vec, DropoutOp{p, key, offset, ViewOf(x), ViewOf(y)});
}

cudaError_t LaunchAxpy(cudaStream_t s, int64_t n, float alpha, ConstTypedPtr x, TypedPtr y) {
  if (n <= 0) return cudaSuccess;
  const int vec = PickVec(!x.is_f32() || !y.is_f32(), {}, {x.data(), y.data()});
  return RunElementwise(s, n, vec, AxpyOp{alpha, ViewOf(x), ViewOf(y)});
}

cudaError_t LaunchAxpby(cudaStream_t s, int64_t n, float alpha, ConstTypedPtr x, float beta,
                        TypedPtr y) {
  if (n <= 0) return cudaSuccess;
  const int vec = PickVec(!x.is_f32() || !y.is_f32(), {}, {x.data(), y.data()});
  return RunElementwise(s, n, vec, AxpbyOp{alpha, beta, ViewOf(x), ViewOf(y)});
}

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

namespace {
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

cudaError_t LaunchSgdUpdate(cudaStream_t s, int64_t n, float lr, float momentum, float weight_decay,
                            float grad_scale, float* param, const float* grad, float* velocity,
                            TypedPtr param_copy) {
  if (n <= 0) return cudaSuccess;
  const int vec = PickVec(false, {}, {param, grad, velocity, param_copy.data()});
  return RunElementwise(
      s, n, vec,
      SgdOp{lr, momentum, weight_decay, grad_scale, param, grad, velocity, ViewOf(param_copy)});
}

cudaError_t LaunchAdamWUpdate(cudaStream_t s, int64_t n, float lr, float beta1, float beta2,
                              float eps, float weight_decay, float bias1, float bias2,
                              float grad_scale, float* param, const float* grad, float* m, float* v,
                              TypedPtr param_copy) {
  if (n <= 0) return cudaSuccess;
  const int vec = PickVec(false, {}, {param, grad, m, v, param_copy.data()});
  return RunElementwise(s, n, vec,
                        AdamWOp{lr, beta1, beta2, eps, weight_decay, bias1, bias2, grad_scale,
                                param, grad, m, v, ViewOf(param_copy)});
}

cudaError_t LaunchSumSquares(cudaStream_t s, int64_t n, const float* x, double* partials) {
  SumSquaresPartialKernel<<<kSumSquaresBlocks, kThreads, 0, s>>>(n, x, partials);
  SumPartialsKernel<<<1, kSumSquaresBlocks, 0, s>>>(partials);
  return cudaGetLastError();
}

}  // namespace strait::site
