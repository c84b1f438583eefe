// The LayerNorm kernels of cuda_kernels.h: LayerNormForward, ResidualLayerNormForward (the
// residual sum stored, then its LayerNorm) and LayerNormBackward's dx, one warp per row
// (kernel_support.cuh's row kernels); dgamma and dbeta are column reductions
// (reduction_kernels.cu).
#include <math.h>
#include <stdint.h>

#include "site/backend/cuda/cuda_kernels.h"
#include "site/backend/cuda/kernel_support.cuh"
#include "site/backend/op_math.h"

namespace strait::site {
using namespace cuda_kernels_internal;  // NOLINT(build/namespaces): the kernel files' helpers
namespace {

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
  for (int64_t row = FirstWarpRow(); row < a.rows; row += WarpRowStride()) {
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
  for (int64_t row = FirstWarpRow(); row < a.rows; row += WarpRowStride()) {
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

// LayerNormForwardKernel over a's rows, in the row shape of its width.
cudaError_t RunLayerNormForward(cudaStream_t s, const LayerNormArgs& a, int vec) {
  return ForRowShape(a.dim, vec, [&](auto v, auto iters) {
    LayerNormForwardKernel<decltype(v)::value, decltype(iters)::value>
        <<<RowGrid(a.rows), kThreads, 0, s>>>(a);
    return cudaGetLastError();
  });
}

}  // namespace

cudaError_t LaunchLayerNormForward(cudaStream_t s, int64_t rows, int dim, ConstTypedPtr x,
                                   const float* gamma, const float* beta, TypedPtr y, float* mean,
                                   float* rstd) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  LayerNormArgs a{
      rows,      dim,  ViewOf(x), In{nullptr, DType::kF32}, Out{nullptr, DType::kF32}, gamma, beta,
      ViewOf(y), mean, rstd};
  const int vec = PickVec(!x.is_f32() || !y.is_f32(), {dim}, {x.data(), y.data(), gamma, beta});
  return RunLayerNormForward(s, a, vec);
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
  return RunLayerNormForward(s, a, vec);
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
  return LaunchLayerNormParamGrads(s, rows, dim, x, mean, rstd, dy, dgamma, dbeta, partials);
}

}  // namespace strait::site
