// Internal to the CUDA backend's kernel files (elementwise_kernels.cu, layout_kernels.cu,
// layernorm_kernels.cu, softmax_kernels.cu, reduction_kernels.cu): what their kernels and launchers
// share. Header-only; nvcc alone includes it, from those files (cuda_kernels.h is the interface).
// Everything is in strait::site::cuda_kernels_internal.
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
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <initializer_list>
#include <type_traits>

#include "site/backend/backend.h"
#include "site/backend/cuda/cuda_kernels.h"
#include "site/backend/op_math.h"

namespace strait::site::cuda_kernels_internal {

inline constexpr int kThreads = 256;          // threads per block of most kernels
inline constexpr int kWarps = kThreads / 32;  // rows per block of the warp-per-row kernels
inline constexpr unsigned kFullMask = 0xffffffffu;
inline constexpr int64_t kMaxBlocks = 1 << 20;  // grid-stride kernels never need more
inline constexpr int kRegisterRowMax = 1024;  // row kernels keep rows up to this width in registers
inline constexpr int kSliceRows =
    kColumnChunkRows / kWarps;  // rows per warp of a column chunk (32)
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

inline In ViewOf(ConstTypedPtr x) { return {x.data(), x.dtype()}; }
inline Out ViewOf(TypedPtr x) { return {x.data(), x.dtype()}; }
__host__ __device__ inline In Read(Out x) { return {x.p, x.t}; }

inline bool IsBf16(DType t) { return t == DType::kBf16; }

// The vector width for an op over the given pointers: 8 when a bf16 tensor takes part (16 bytes
// of bf16), else 4; halved to 4 when a width is not a multiple of 8; 1 when a pointer is not
// 16-byte aligned or a width is not a multiple of 4. `multiples` are the row widths and strides
// (in elements) that a vector must not straddle.
inline int PickVec(bool any_bf16, std::initializer_list<int64_t> multiples,
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

inline unsigned GridFor(int64_t items, int per_block = kThreads) {
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

// ---------------------------------------------------------------------------------------------
// Row kernels: one warp per row (kWarps rows per block, grid-stride over rows: FirstWarpRow, then
// steps of WarpRowStride). ITERS > 0: the row (dim <= 32 * VEC * ITERS) stays in registers, read
// once; lane l holds groups l, l + 32, ... ITERS == 0: the row streams through again for each pass
// (wide rows), each lane touching the same groups in every pass.

// Calls f(IntC<VEC>, IntC<ITERS>) for the row shape of rows `width` elements wide.
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

inline unsigned RowGrid(int64_t rows) { return GridFor(rows, kWarps); }

__device__ __forceinline__ int64_t FirstWarpRow() {
  return blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
}
__device__ __forceinline__ int64_t WarpRowStride() { return int64_t{gridDim.x} * kWarps; }

// ---------------------------------------------------------------------------------------------
// Launchers one kernel file lends another.

// LayerNorm backward's dgamma and dbeta (reduction_kernels.cu): the column sums of
// (x - mean) * rstd * dy and of dy, added into dgamma and dbeta. partials: 2 * PartialFloats(rows,
// dim).
cudaError_t LaunchLayerNormParamGrads(cudaStream_t s, int64_t rows, int dim, ConstTypedPtr x,
                                      const float* mean, const float* rstd, ConstTypedPtr dy,
                                      float* dgamma, float* dbeta, float* partials);

// RMSNorm backward's dgamma (reduction_kernels.cu): the column sums of x * rstd * dy, added into
// dgamma. partials: PartialFloats(rows, dim).
cudaError_t LaunchRmsNormParamGrads(cudaStream_t s, int64_t rows, int dim, ConstTypedPtr x,
                                    const float* rstd, ConstTypedPtr dy, float* dgamma,
                                    float* partials);

}  // namespace strait::site::cuda_kernels_internal
