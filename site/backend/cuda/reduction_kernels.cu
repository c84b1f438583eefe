// The reduction kernels of cuda_kernels.h: the column reductions (ColumnSum, LayerNorm
// backward's dgamma and dbeta, the GEMM epilogue's bias gradient), the GEMM epilogue, and
// SumSquares. Every sum runs in an order fixed by the shapes alone.
#include <stdint.h>

#include "site/backend/cuda/cuda_kernels.h"
#include "site/backend/cuda/kernel_support.cuh"

namespace strait::site {
using namespace cuda_kernels_internal;  // NOLINT(build/namespaces): the kernel files' helpers
namespace {

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

// RMSNorm backward's dgamma: the column sums of x * rstd * dy.
struct RmsNormParamsOp {
  static constexpr int kSums = 1;
  In x, dy;
  const float* rstd;
  int dim;
  template <int N>
  __device__ void Row(int64_t r, int c, float (&acc)[kSums][N]) const {
    float xv[N], dyv[N];
    LoadV<N>(x, r * dim + c, xv);
    LoadV<N>(dy, r * dim + c, dyv);
    const float rs = rstd[r];
#pragma unroll
    for (int e = 0; e < N; ++e) acc[0][e] += dyv[e] * xv[e] * rs;
  }
};

// ---------------------------------------------------------------------------------------------
// The GEMM epilogue on the f32 product t [m, n] (packed): v = t (+ bias, rounded to bf16 when C is
// bf16); pre = v; v = act(v); v = v * act'(act_input) (grad_of); c = v. bias_grad sums v as C
// stores it.

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
    const bool bf16_c = a.c.t == DType::kBf16;
#pragma unroll
    for (int e = 0; e < N; ++e) v[e] += bf16_c ? RoundToBf16(b[e]) : b[e];
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
    const bool bf16_c = a.c.t == DType::kBf16;
#pragma unroll
    for (int e = 0; e < N; ++e) acc[0][e] += bf16_c ? RoundToBf16(v[e]) : v[e];
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

cudaError_t cuda_kernels_internal::LaunchLayerNormParamGrads(cudaStream_t s, int64_t rows, int dim,
                                                             ConstTypedPtr x, const float* mean,
                                                             const float* rstd, ConstTypedPtr dy,
                                                             float* dgamma, float* dbeta,
                                                             float* partials) {
  const int pvec = PickVec(!x.is_f32() || !dy.is_f32(), {dim}, {x.data(), dy.data()});
  return RunColumnReduction(s, rows, dim, pvec,
                            LayerNormParamsOp{ViewOf(x), ViewOf(dy), mean, rstd, dim}, dgamma,
                            dbeta, 1.0f, partials);
}

cudaError_t cuda_kernels_internal::LaunchRmsNormParamGrads(cudaStream_t s, int64_t rows, int dim,
                                                           ConstTypedPtr x, const float* rstd,
                                                           ConstTypedPtr dy, float* dgamma,
                                                           float* partials) {
  const int pvec = PickVec(!x.is_f32() || !dy.is_f32(), {dim}, {x.data(), dy.data()});
  return RunColumnReduction(s, rows, dim, pvec, RmsNormParamsOp{ViewOf(x), ViewOf(dy), rstd, dim},
                            dgamma, nullptr, 1.0f, partials);
}

cudaError_t LaunchSumSquares(cudaStream_t s, int64_t n, const float* x, double* partials) {
  SumSquaresPartialKernel<<<kSumSquaresBlocks, kThreads, 0, s>>>(n, x, partials);
  SumPartialsKernel<<<1, kSumSquaresBlocks, 0, s>>>(partials);
  return cudaGetLastError();
}

}  // namespace strait::site
