// The CUDA backend's kernels: one per Backend op that is not a matrix product. Reductions use fixed
// launch shapes and fixed combination orders, so results are deterministic.
#include <math.h>

#include "site/backend/cuda/cuda_kernels.h"
#include "site/backend/op_math.h"

namespace strait::site {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

#define GRID_STRIDE(i, n)                                                   \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{blockDim.x} * gridDim.x)

__device__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ float WarpMax(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__global__ void FillKernel(float* x, int64_t n, float v) { GRID_STRIDE(i, n) x[i] = v; }

__global__ void RoundToBf16Kernel(const float* x, int64_t n, float* y) {
  GRID_STRIDE(i, n) y[i] = RoundToBf16(x[i]);
}

__global__ void BiasActivationKernel(int64_t rows, int cols, const float* bias, ActivationOp act,
                                     float* x, float* y) {
  GRID_STRIDE(i, rows * cols) {
    float v = x[i] + (bias != nullptr ? bias[i % cols] : 0.0f);
    x[i] = v;
    y[i] = act == ActivationOp::kRelu   ? (v > 0.0f ? v : 0.0f)
           : act == ActivationOp::kGelu ? Gelu(v)
                                        : v;
  }
}

__global__ void ActivationBackwardKernel(int64_t n, ActivationOp act, const float* x,
                                         const float* dy, float* dx) {
  GRID_STRIDE(i, n) {
    dx[i] = act == ActivationOp::kRelu   ? (x[i] > 0.0f ? dy[i] : 0.0f)
            : act == ActivationOp::kGelu ? dy[i] * GeluGrad(x[i])
                                         : dy[i];
  }
}

// One thread per column, rows in order: the CPU's summation order.
__global__ void ColumnSumKernel(int64_t rows, int cols, const float* x, int64_t ldx, float beta,
                                float* out) {
  GRID_STRIDE(c, cols) {
    float acc = 0.0f;
    for (int64_t r = 0; r < rows; ++r) acc += x[r * ldx + c];
    out[c] = (beta == 0.0f ? 0.0f : beta * out[c]) + acc;
  }
}

// One warp per row.
__global__ void LayerNormForwardKernel(int64_t rows, int dim, const float* x, const float* gamma,
                                       const float* beta, float* y, float* mean, float* rstd) {
  const int64_t r = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* xr = x + r * dim;
  float sum = 0.0f;
  for (int c = lane; c < dim; c += 32) sum += xr[c];
  const float mu = WarpSum(sum) / dim;
  float var = 0.0f;
  for (int c = lane; c < dim; c += 32) var += (xr[c] - mu) * (xr[c] - mu);
  const float rs = rsqrtf(WarpSum(var) / dim + kLayerNormEps);
  for (int c = lane; c < dim; c += 32) y[r * dim + c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

__global__ void LayerNormBackwardDxKernel(int64_t rows, int dim, const float* x, const float* gamma,
                                          const float* mean, const float* rstd, const float* dy,
                                          float* dx) {
  const int64_t r = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* xr = x + r * dim;
  const float* dyr = dy + r * dim;
  const float mu = mean[r], rs = rstd[r];
  float a = 0.0f, b = 0.0f;
  for (int c = lane; c < dim; c += 32) {
    const float dnorm = dyr[c] * gamma[c];
    a += dnorm;
    b += dnorm * (xr[c] - mu) * rs;
  }
  const float dnorm_mean = WarpSum(a) / dim, dnorm_norm_mean = WarpSum(b) / dim;
  for (int c = lane; c < dim; c += 32) {
    const float norm = (xr[c] - mu) * rs;
    dx[r * dim + c] += (dyr[c] * gamma[c] - dnorm_mean - norm * dnorm_norm_mean) * rs;
  }
}

__global__ void LayerNormBackwardParamsKernel(int64_t rows, int dim, const float* x,
                                              const float* mean, const float* rstd, const float* dy,
                                              float* dgamma, float* dbeta) {
  GRID_STRIDE(c, dim) {
    float g = 0.0f, b = 0.0f;
    for (int64_t r = 0; r < rows; ++r) {
      g += (x[r * dim + c] - mean[r]) * rstd[r] * dy[r * dim + c];
      b += dy[r * dim + c];
    }
    dgamma[c] += g;
    dbeta[c] += b;
  }
}

__global__ void SoftmaxRowsKernel(int64_t rows, int cols, float scale, bool causal, const float* x,
                                  float* y) {
  const int64_t r = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* xr = x + r * cols;
  float* yr = y + r * cols;
  const int valid = causal ? static_cast<int>(r % cols) + 1 : cols;
  float mx = -INFINITY;
  for (int c = lane; c < valid; c += 32) mx = fmaxf(mx, scale * xr[c]);
  mx = WarpMax(mx);
  float sum = 0.0f;
  for (int c = lane; c < valid; c += 32) {
    const float e = expf(scale * xr[c] - mx);
    yr[c] = e;
    sum += e;
  }
  const float inv = 1.0f / WarpSum(sum);
  for (int c = lane; c < valid; c += 32) yr[c] *= inv;
  for (int c = valid + lane; c < cols; c += 32) yr[c] = 0.0f;
}

// One thread per element of y.
__global__ void EmbeddingLookupKernel(int64_t rows, int dim, int vocab, const float* ids,
                                      const float* table, float* y) {
  GRID_STRIDE(i, rows * dim) {
    const int64_t r = i / dim;
    const int64_t id = TokenId(ids[r], vocab);
    y[i] = id < 0 ? 0.0f : table[id * dim + i % dim];
  }
}

// One thread per column of the table, adding the rows in order: deterministic without atomics.
__global__ void EmbeddingBackwardKernel(int64_t rows, int dim, int vocab, const float* ids,
                                        const float* dy, float* dtable) {
  GRID_STRIDE(c, dim) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t id = TokenId(ids[r], vocab);
      if (id >= 0) dtable[id * dim + c] += dy[r * dim + c];
    }
  }
}

__global__ void SoftmaxRowsBackwardKernel(int64_t rows, int cols, float scale, const float* y,
                                          const float* dy, float* dx) {
  const int64_t r = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const float* yr = y + r * cols;
  const float* dyr = dy + r * cols;
  float dot = 0.0f;
  for (int c = lane; c < cols; c += 32) dot += dyr[c] * yr[c];
  dot = WarpSum(dot);
  for (int c = lane; c < cols; c += 32) dx[r * cols + c] = scale * yr[c] * (dyr[c] - dot);
}

__global__ void CrossEntropyKernel(int64_t rows, int classes, const float* logits,
                                   const int32_t* labels, float grad_scale, float* loss,
                                   int32_t* correct, float* dlogits) {
  GRID_STRIDE(r, rows) {
    const float* lr = logits + r * classes;
    float* dr = dlogits + r * classes;
    const int32_t label = labels[r];
    if (label < 0 || label >= classes) {
      loss[r] = 0.0f;
      correct[r] = 0;
      for (int c = 0; c < classes; ++c) dr[c] = 0.0f;
      continue;
    }
    int argmax = 0;
    for (int c = 1; c < classes; ++c) argmax = lr[c] > lr[argmax] ? c : argmax;
    const float mx = lr[argmax];
    float sum = 0.0f;
    for (int c = 0; c < classes; ++c) sum += expf(lr[c] - mx);
    loss[r] = logf(sum) + mx - lr[label];
    correct[r] = argmax == label ? 1 : 0;
    const float inv = 1.0f / sum;
    for (int c = 0; c < classes; ++c) {
      dr[c] = (expf(lr[c] - mx) * inv - (c == label ? 1.0f : 0.0f)) * grad_scale;
    }
  }
}

__global__ void DropoutKernel(int64_t n, float p, uint64_t key, int64_t offset, const float* x,
                              float* y) {
  GRID_STRIDE(i, n) y[i] = x[i] * DropoutScale(p, key, static_cast<uint64_t>(offset + i));
}

__global__ void AxpyKernel(int64_t n, float alpha, const float* x, float* y) {
  GRID_STRIDE(i, n) y[i] += alpha * x[i];
}

// Rounded products and sum, as the CPU backend computes it (nvcc would fuse them otherwise).
__global__ void AxpbyKernel(int64_t n, float alpha, const float* x, float beta, float* y) {
  GRID_STRIDE(i, n) y[i] = __fadd_rn(__fmul_rn(alpha, x[i]), __fmul_rn(beta, y[i]));
}

__global__ void Copy2DKernel(int64_t rows, int cols, const float* src, int64_t ld_src, float* dst,
                             int64_t ld_dst) {
  GRID_STRIDE(i, rows * cols) {
    const int64_t r = i / cols, c = i % cols;
    dst[r * ld_dst + c] = src[r * ld_src + c];
  }
}

__global__ void ExtractPatchesKernel(int n, int channels, int height, int width, int p,
                                     const float* images, float* patches) {
  const int gw = width / p, per_image = channels * height * width;
  const int patch_size = channels * p * p;
  GRID_STRIDE(i, int64_t{n} * per_image) {
    // i indexes the output: (b, patch, c, py, px).
    const int64_t b = i / per_image;
    const int rest = static_cast<int>(i % per_image);
    const int patch = rest / patch_size, within = rest % patch_size;
    const int c = within / (p * p), py = within / p % p, px = within % p;
    const int row = patch / gw * p + py, col = patch % gw * p + px;
    patches[i] = images[b * per_image + (int64_t{c} * height + row) * width + col];
  }
}

// y[((b * heads + h) * tokens + t) * dh + j] <-> x[(b * tokens + t) * ldx + h * dh + j]
__global__ void HeadsKernel(int n, int tokens, int heads, int dh, const float* src, float* dst,
                            int64_t ldx, bool to_batch) {
  GRID_STRIDE(i, int64_t{n} * heads * tokens * dh) {
    const int j = static_cast<int>(i % dh);
    const int64_t bht = i / dh;
    const int t = static_cast<int>(bht % tokens);
    const int64_t bh = bht / tokens;
    const int h = static_cast<int>(bh % heads);
    const int64_t b = bh / heads;
    const int64_t xi = (b * tokens + t) * ldx + int64_t{h} * dh + j;
    if (to_batch) {
      dst[i] = src[xi];
    } else {
      dst[xi] = src[i];
    }
  }
}

__global__ void SgdKernel(int64_t n, float lr, float momentum, float wd, float scale, float* param,
                          const float* grad, float* velocity) {
  GRID_STRIDE(i, n) {
    const float g = grad[i] * scale + wd * param[i];
    velocity[i] = momentum * velocity[i] + g;
    param[i] -= lr * velocity[i];
  }
}

__global__ void AdamWKernel(int64_t n, float lr, float b1, float b2, float eps, float wd,
                            float bias1, float bias2, float scale, float* param, const float* grad,
                            float* m, float* v) {
  GRID_STRIDE(i, n) {
    const float g = grad[i] * scale;
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    const float update = (m[i] / bias1) / (sqrtf(v[i] / bias2) + eps);
    param[i] -= lr * (update + wd * param[i]);
  }
}

// Deterministic sum of squares: a fixed grid of kSumSquaresBlocks x kThreads partial sums combined
// in a fixed tree order, then one block combines the partials.

__device__ void BlockTreeSum(double* shared) {
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    __syncthreads();
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
  }
  __syncthreads();
}

__global__ void SumSquaresPartialKernel(int64_t n, const float* x, double* partial) {
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

__global__ void SumPartialsKernel(double* partial) {
  __shared__ double shared[kSumSquaresBlocks];
  shared[threadIdx.x] = partial[threadIdx.x];
  BlockTreeSum(shared);
  if (threadIdx.x == 0) partial[0] = shared[0];
}

// One thread per item (grid-stride beyond 65535 blocks).
template <typename... KernelArgs, typename... Args>
cudaError_t Launch(cudaStream_t s, void (*kernel)(KernelArgs...), int64_t items, Args... args) {
  if (items <= 0) return cudaSuccess;
  kernel<<<Blocks(items), kThreads, 0, s>>>(args...);
  return cudaGetLastError();
}

// One warp per row.
template <typename... KernelArgs, typename... Args>
cudaError_t LaunchWarps(cudaStream_t s, void (*kernel)(KernelArgs...), int64_t rows, Args... args) {
  if (rows <= 0) return cudaSuccess;
  const int64_t warps_per_block = kThreads / 32;
  kernel<<<static_cast<unsigned>((rows + warps_per_block - 1) / warps_per_block), kThreads, 0, s>>>(
      args...);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchFill(cudaStream_t s, float* x, int64_t n, float value) {
  return Launch(s, FillKernel, n, x, n, value);
}
cudaError_t LaunchRoundToBf16(cudaStream_t s, const float* x, int64_t n, float* y) {
  return Launch(s, RoundToBf16Kernel, n, x, n, y);
}
cudaError_t LaunchBiasActivation(cudaStream_t s, int64_t rows, int cols, const float* bias,
                                 ActivationOp act, float* x, float* y) {
  return Launch(s, BiasActivationKernel, rows * cols, rows, cols, bias, act, x, y);
}
cudaError_t LaunchActivationBackward(cudaStream_t s, int64_t n, ActivationOp act, const float* x,
                                     const float* dy, float* dx) {
  return Launch(s, ActivationBackwardKernel, n, n, act, x, dy, dx);
}
cudaError_t LaunchColumnSum(cudaStream_t s, int64_t rows, int cols, const float* x, int64_t ldx,
                            float beta, float* out) {
  return Launch(s, ColumnSumKernel, cols, rows, cols, x, ldx, beta, out);
}
cudaError_t LaunchLayerNormForward(cudaStream_t s, int64_t rows, int dim, const float* x,
                                   const float* gamma, const float* beta, float* y, float* mean,
                                   float* rstd) {
  return LaunchWarps(s, LayerNormForwardKernel, rows, rows, dim, x, gamma, beta, y, mean, rstd);
}
cudaError_t LaunchLayerNormBackward(cudaStream_t s, int64_t rows, int dim, const float* x,
                                    const float* gamma, const float* mean, const float* rstd,
                                    const float* dy, float* dx, float* dgamma, float* dbeta) {
  const cudaError_t e =
      LaunchWarps(s, LayerNormBackwardDxKernel, rows, rows, dim, x, gamma, mean, rstd, dy, dx);
  if (e != cudaSuccess) return e;
  return Launch(s, LayerNormBackwardParamsKernel, dim, rows, dim, x, mean, rstd, dy, dgamma, dbeta);
}
cudaError_t LaunchSoftmaxRows(cudaStream_t s, int64_t rows, int cols, float scale, bool causal,
                              const float* x, float* y) {
  return LaunchWarps(s, SoftmaxRowsKernel, rows, rows, cols, scale, causal, x, y);
}
cudaError_t LaunchEmbeddingLookup(cudaStream_t s, int64_t rows, int dim, int vocab,
                                  const float* ids, const float* table, float* y) {
  return Launch(s, EmbeddingLookupKernel, rows * dim, rows, dim, vocab, ids, table, y);
}
cudaError_t LaunchEmbeddingBackward(cudaStream_t s, int64_t rows, int dim, int vocab,
                                    const float* ids, const float* dy, float* dtable) {
  return Launch(s, EmbeddingBackwardKernel, dim, rows, dim, vocab, ids, dy, dtable);
}
cudaError_t LaunchSoftmaxRowsBackward(cudaStream_t s, int64_t rows, int cols, float scale,
                                      const float* y, const float* dy, float* dx) {
  return LaunchWarps(s, SoftmaxRowsBackwardKernel, rows, rows, cols, scale, y, dy, dx);
}
cudaError_t LaunchCrossEntropy(cudaStream_t s, int64_t rows, int classes, const float* logits,
                               const int32_t* labels, float grad_scale, float* loss,
                               int32_t* correct, float* dlogits) {
  return Launch(s, CrossEntropyKernel, rows, rows, classes, logits, labels, grad_scale, loss,
                correct, dlogits);
}
cudaError_t LaunchDropout(cudaStream_t s, int64_t n, float p, uint64_t key, int64_t offset,
                          const float* x, float* y) {
  return Launch(s, DropoutKernel, n, n, p, key, offset, x, y);
}
cudaError_t LaunchAxpy(cudaStream_t s, int64_t n, float alpha, const float* x, float* y) {
  return Launch(s, AxpyKernel, n, n, alpha, x, y);
}
cudaError_t LaunchAxpby(cudaStream_t s, int64_t n, float alpha, const float* x, float beta,
                        float* y) {
  return Launch(s, AxpbyKernel, n, n, alpha, x, beta, y);
}
cudaError_t LaunchCopy2D(cudaStream_t s, int64_t rows, int cols, const float* src, int64_t ld_src,
                         float* dst, int64_t ld_dst) {
  return Launch(s, Copy2DKernel, rows * cols, rows, cols, src, ld_src, dst, ld_dst);
}
cudaError_t LaunchExtractPatches(cudaStream_t s, int n, int channels, int height, int width, int p,
                                 const float* images, float* patches) {
  return Launch(s, ExtractPatchesKernel, int64_t{n} * channels * height * width, n, channels,
                height, width, p, images, patches);
}
cudaError_t LaunchHeadsToBatch(cudaStream_t s, int n, int tokens, int heads, int dh, const float* x,
                               int64_t ldx, float* y) {
  return Launch(s, HeadsKernel, int64_t{n} * heads * tokens * dh, n, tokens, heads, dh, x, y, ldx,
                true);
}
cudaError_t LaunchBatchToHeads(cudaStream_t s, int n, int tokens, int heads, int dh, const float* y,
                               float* x, int64_t ldx) {
  return Launch(s, HeadsKernel, int64_t{n} * heads * tokens * dh, n, tokens, heads, dh, y, x, ldx,
                false);
}
cudaError_t LaunchSgdUpdate(cudaStream_t s, int64_t n, float lr, float momentum, float weight_decay,
                            float grad_scale, float* param, const float* grad, float* velocity) {
  return Launch(s, SgdKernel, n, n, lr, momentum, weight_decay, grad_scale, param, grad, velocity);
}
cudaError_t LaunchAdamWUpdate(cudaStream_t s, int64_t n, float lr, float beta1, float beta2,
                              float eps, float weight_decay, float bias1, float bias2,
                              float grad_scale, float* param, const float* grad, float* m,
                              float* v) {
  return Launch(s, AdamWKernel, n, n, lr, beta1, beta2, eps, weight_decay, bias1, bias2, grad_scale,
                param, grad, m, v);
}
cudaError_t LaunchSumSquares(cudaStream_t s, int64_t n, const float* x, double* partials) {
  SumSquaresPartialKernel<<<kSumSquaresBlocks, kThreads, 0, s>>>(n, x, partials);
  SumPartialsKernel<<<1, kSumSquaresBlocks, 0, s>>>(partials);
  return cudaGetLastError();
}

}  // namespace strait::site
