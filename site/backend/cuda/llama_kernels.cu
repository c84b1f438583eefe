// LLaMA's kernels of cuda_kernels.h: RMSNorm (one warp per row; dgamma a column reduction,
// reduction_kernels.cu), rotary positions, SwiGLU and the key/value heads of grouped-query
// attention (one thread per element). Each computes the CPU loops' expression
// (site/backend/cpu/llama_loops.cc) in f32 and rounds once on the store.
#include <math.h>
#include <stdint.h>

#include "site/backend/cuda/cuda_kernels.h"
#include "site/backend/cuda/kernel_support.cuh"
#include "site/backend/op_math.h"

namespace strait::site {
using namespace cuda_kernels_internal;  // NOLINT(build/namespaces): the kernel files' helpers
namespace {

__global__ void __launch_bounds__(kThreads)
    RmsNormForwardKernel(int64_t rows, int dim, float eps, In x, const float* gamma, Out y,
                         float* rstd) {
  const int lane = threadIdx.x & 31;
  for (int64_t row = FirstWarpRow(); row < rows; row += WarpRowStride()) {
    const int64_t base = row * dim;
    float sum = 0.0f;
    for (int c = lane; c < dim; c += 32) {
      const float v = Load1(x, base + c);
      sum += v * v;
    }
    const float rs = 1.0f / sqrtf(WarpSum(sum) / dim + eps);
    for (int c = lane; c < dim; c += 32) {
      float out[1] = {Load1(x, base + c) * rs * gamma[c]};
      StoreV<1>(y, base + c, out);
    }
    if (lane == 0) rstd[row] = rs;
  }
}

__global__ void __launch_bounds__(kThreads)
    RmsNormBackwardDxKernel(int64_t rows, int dim, In x, const float* gamma, const float* rstd,
                            In dy, Out dx) {
  const int lane = threadIdx.x & 31;
  for (int64_t row = FirstWarpRow(); row < rows; row += WarpRowStride()) {
    const int64_t base = row * dim;
    const float rs = rstd[row];
    float dot = 0.0f;
    for (int c = lane; c < dim; c += 32) dot += Load1(dy, base + c) * gamma[c] * Load1(x, base + c);
    const float k = WarpSum(dot) * rs * rs * rs / dim;
    for (int c = lane; c < dim; c += 32) {
      float out[1] = {Load1(Read(dx), base + c) + Load1(dy, base + c) * gamma[c] * rs -
                      Load1(x, base + c) * k};
      StoreV<1>(dx, base + c, out);
    }
  }
}

// One thread per (row, head, pair).
__global__ void __launch_bounds__(kThreads)
    RotaryKernel(int64_t rows, int tokens, int heads, int dh, double theta, float sign, Out x,
                 int64_t ldx) {
  const int pairs = dh / 2;
  const int64_t n = rows * heads * pairs;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{blockDim.x} * gridDim.x) {
    const int i = static_cast<int>(e % pairs);
    const int h = static_cast<int>((e / pairs) % heads);
    const int64_t r = e / (int64_t{pairs} * heads);
    float c, s;
    RotaryCosSin(r % tokens, i, dh, theta, &c, &s);
    s *= sign;
    const int64_t at = r * ldx + int64_t{h} * dh + 2 * i;
    const float a = Load1(Read(x), at), b = Load1(Read(x), at + 1);
    float out[1] = {a * c - b * s};
    StoreV<1>(x, at, out);
    out[0] = a * s + b * c;
    StoreV<1>(x, at + 1, out);
  }
}

__global__ void __launch_bounds__(kThreads)
    SwiGluKernel(int64_t rows, int f, In gate_up, In dy, Out out) {
  const int64_t n = rows * f;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t r = e / f, c = e % f;
    const float g = Load1(gate_up, r * 2 * f + c), u = Load1(gate_up, r * 2 * f + f + c);
    float v[1];
    if (dy.p == nullptr) {  // forward: out = y [rows, f]
      v[0] = Silu(g) * u;
      StoreV<1>(out, e, v);
    } else {  // backward: out = dgate_up [rows, 2f]
      const float d = Load1(dy, e);
      v[0] = d * u * SiluGrad(g);
      StoreV<1>(out, r * 2 * f + c, v);
      v[0] = d * Silu(g);
      StoreV<1>(out, r * 2 * f + f + c, v);
    }
  }
}

// One thread per element of full [rows, 3 heads dh].
__global__ void __launch_bounds__(kThreads)
    RepeatKvHeadsKernel(int64_t rows, int heads, int kv_heads, int dh, In qkv, Out full) {
  const int64_t q = int64_t{heads} * dh, kv = int64_t{kv_heads} * dh, group = heads / kv_heads;
  const int64_t n = rows * 3 * q;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t r = e / (3 * q), col = e % (3 * q);
    const int64_t part = col / q, h = (col % q) / dh, j = col % dh;
    const int64_t src = part == 0 ? col : q + (part - 1) * kv + (h / group) * dh + j;
    float v[1] = {Load1(qkv, r * (q + 2 * kv) + src)};
    StoreV<1>(full, e, v);
  }
}

// One thread per element of dqkv [rows, (heads + 2 kv_heads) dh]; copies summed in head order.
__global__ void __launch_bounds__(kThreads)
    SumKvHeadsKernel(int64_t rows, int heads, int kv_heads, int dh, In dfull, Out dqkv) {
  const int64_t q = int64_t{heads} * dh, kv = int64_t{kv_heads} * dh, group = heads / kv_heads;
  const int64_t width = q + 2 * kv, n = rows * width;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
       e += int64_t{blockDim.x} * gridDim.x) {
    const int64_t r = e / width, col = e % width;
    float v[1];
    if (col < q) {
      v[0] = Load1(dfull, r * 3 * q + col);
    } else {
      const int64_t part = (col - q) / kv, g = ((col - q) % kv) / dh, j = (col - q) % dh;
      const int64_t first = r * 3 * q + (part + 1) * q + g * group * dh + j;
      v[0] = Load1(dfull, first);
      for (int64_t k = 1; k < group; ++k) v[0] += Load1(dfull, first + k * dh);
    }
    StoreV<1>(dqkv, e, v);
  }
}

}  // namespace

cudaError_t LaunchRmsNormForward(cudaStream_t s, int64_t rows, int dim, float eps, ConstTypedPtr x,
                                 const float* gamma, TypedPtr y, float* rstd) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  RmsNormForwardKernel<<<RowGrid(rows), kThreads, 0, s>>>(rows, dim, eps, ViewOf(x), gamma,
                                                          ViewOf(y), rstd);
  return cudaGetLastError();
}

cudaError_t LaunchRmsNormBackward(cudaStream_t s, int64_t rows, int dim, ConstTypedPtr x,
                                  const float* gamma, const float* rstd, ConstTypedPtr dy,
                                  TypedPtr dx, float* dgamma, float* partials) {
  if (rows <= 0 || dim <= 0) return cudaSuccess;
  RmsNormBackwardDxKernel<<<RowGrid(rows), kThreads, 0, s>>>(rows, dim, ViewOf(x), gamma, rstd,
                                                             ViewOf(dy), ViewOf(dx));
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  return LaunchRmsNormParamGrads(s, rows, dim, x, rstd, dy, dgamma, partials);
}

cudaError_t LaunchRotary(cudaStream_t s, int64_t rows, int tokens, int heads, int dh, double theta,
                         bool inverse, TypedPtr x, int64_t ldx) {
  if (rows <= 0 || heads <= 0 || dh < 2) return cudaSuccess;
  RotaryKernel<<<GridFor(rows * heads * (dh / 2)), kThreads, 0, s>>>(
      rows, tokens, heads, dh, theta, inverse ? -1.0f : 1.0f, ViewOf(x), ldx);
  return cudaGetLastError();
}

cudaError_t LaunchSwiGluForward(cudaStream_t s, int64_t rows, int f, ConstTypedPtr gate_up,
                                TypedPtr y) {
  if (rows <= 0 || f <= 0) return cudaSuccess;
  SwiGluKernel<<<GridFor(rows * f), kThreads, 0, s>>>(rows, f, ViewOf(gate_up),
                                                      In{nullptr, DType::kF32}, ViewOf(y));
  return cudaGetLastError();
}

cudaError_t LaunchSwiGluBackward(cudaStream_t s, int64_t rows, int f, ConstTypedPtr gate_up,
                                 ConstTypedPtr dy, TypedPtr dgate_up) {
  if (rows <= 0 || f <= 0) return cudaSuccess;
  if (!dy) return cudaErrorInvalidValue;
  SwiGluKernel<<<GridFor(rows * f), kThreads, 0, s>>>(rows, f, ViewOf(gate_up), ViewOf(dy),
                                                      ViewOf(dgate_up));
  return cudaGetLastError();
}

cudaError_t LaunchRepeatKvHeads(cudaStream_t s, int64_t rows, int heads, int kv_heads, int dh,
                                ConstTypedPtr qkv, TypedPtr full) {
  if (rows <= 0 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0) return cudaSuccess;
  RepeatKvHeadsKernel<<<GridFor(rows * 3 * heads * dh), kThreads, 0, s>>>(
      rows, heads, kv_heads, dh, ViewOf(qkv), ViewOf(full));
  return cudaGetLastError();
}

cudaError_t LaunchSumKvHeads(cudaStream_t s, int64_t rows, int heads, int kv_heads, int dh,
                             ConstTypedPtr dfull, TypedPtr dqkv) {
  if (rows <= 0 || heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0) return cudaSuccess;
  SumKvHeadsKernel<<<GridFor(rows * (heads + 2 * kv_heads) * dh), kThreads, 0, s>>>(
      rows, heads, kv_heads, dh, ViewOf(dfull), ViewOf(dqkv));
  return cudaGetLastError();
}

}  // namespace strait::site
