// The elementwise kernels of cuda_kernels.h: Fill, Convert, BiasActivation, ActivationBackward,
// Dropout, Axpy, Axpby and the optimizers' updates (SGD, AdamW). Each op is a functor whose
// Apply<N>(i) handles elements [i, i + N), run by ElementwiseKernel (kernel_support.cuh).
#include <math.h>
#include <stdint.h>

#include "site/backend/cuda/cuda_kernels.h"
#include "site/backend/cuda/kernel_support.cuh"
#include "site/backend/op_math.h"

namespace strait::site {
using namespace cuda_kernels_internal;  // NOLINT(build/namespaces): the kernel files' helpers
namespace {

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

// y = f(x, y), element by element.
template <typename F>
struct UpdateYOp {
  F f;
  In x;
  Out y;
  template <int N>
  __device__ void Apply(int64_t i) const {
    float xv[N], yv[N];
    LoadV<N>(x, i, xv);
    LoadV<N>(Read(y), i, yv);
#pragma unroll
    for (int k = 0; k < N; ++k) yv[k] = f(xv[k], yv[k]);
    StoreV<N>(y, i, yv);
  }
};

struct Axpy {
  float alpha;
  __device__ float operator()(float x, float y) const { return y + alpha * x; }
};

// Rounded products and sum, as the CPU backend computes it (nvcc would fuse them otherwise).
struct Axpby {
  float alpha, beta;
  __device__ float operator()(float x, float y) const {
    return __fadd_rn(__fmul_rn(alpha, x), __fmul_rn(beta, y));
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
}  // namespace

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

cudaError_t LaunchDropout(cudaStream_t s, int64_t n, float p, uint64_t key, int64_t offset,
                          ConstTypedPtr x, TypedPtr y) {
  if (n <= 0) return cudaSuccess;
  const int vec = PickVec(!x.is_f32() || !y.is_f32(), {}, {x.data(), y.data()});
  return RunElementwise(s, n, vec, DropoutOp{p, key, offset, ViewOf(x), ViewOf(y)});
}

cudaError_t LaunchAxpy(cudaStream_t s, int64_t n, float alpha, ConstTypedPtr x, TypedPtr y) {
  if (n <= 0) return cudaSuccess;
  const int vec = PickVec(!x.is_f32() || !y.is_f32(), {}, {x.data(), y.data()});
  return RunElementwise(s, n, vec, UpdateYOp<Axpy>{{alpha}, ViewOf(x), ViewOf(y)});
}

cudaError_t LaunchAxpby(cudaStream_t s, int64_t n, float alpha, ConstTypedPtr x, float beta,
                        TypedPtr y) {
  if (n <= 0) return cudaSuccess;
  const int vec = PickVec(!x.is_f32() || !y.is_f32(), {}, {x.data(), y.data()});
  return RunElementwise(s, n, vec, UpdateYOp<Axpby>{{alpha, beta}, ViewOf(x), ViewOf(y)});
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

}  // namespace strait::site
