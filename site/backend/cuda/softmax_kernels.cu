// The softmax kernels of cuda_kernels.h: SoftmaxRows and its backward, one warp per row
// (kernel_support.cuh's row kernels), and ClassifierLoss, one block per row.
#include <math.h>
#include <stdint.h>

#include "site/backend/cuda/cuda_kernels.h"
#include "site/backend/cuda/kernel_support.cuh"

namespace strait::site {
using namespace cuda_kernels_internal;  // NOLINT(build/namespaces): the kernel files' helpers
namespace {

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
  for (int64_t row = FirstWarpRow(); row < a.rows; row += WarpRowStride()) {
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
  for (int64_t row = FirstWarpRow(); row < a.rows; row += WarpRowStride()) {
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

}  // namespace

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

}  // namespace strait::site
