// Launchers of the CUDA backend's kernels (one per Backend op that is not a cuBLAS call). Each
// queues its kernel on `stream` and returns cudaGetLastError(). Pointers are device memory; shapes
// and semantics are those of the Backend op of the same name (site/backend/backend.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "site/backend/backend.h"

namespace strait::cuda {

// Doubles of device scratch that SumSquares needs.
inline constexpr int kSumBlocks = 256;

cudaError_t Fill(cudaStream_t s, float* x, int64_t n, float value);
cudaError_t BiasActivation(cudaStream_t s, int64_t rows, int cols, const float* bias,
                           ActivationOp act, float* x, float* y);
cudaError_t ActivationBackward(cudaStream_t s, int64_t n, ActivationOp act, const float* x,
                               const float* dy, float* dx);
cudaError_t ColumnSum(cudaStream_t s, int64_t rows, int cols, const float* x, int64_t ldx,
                      float beta, float* out);
cudaError_t LayerNormForward(cudaStream_t s, int64_t rows, int dim, const float* x,
                             const float* gamma, const float* beta, float* y, float* mean,
                             float* rstd);
cudaError_t LayerNormBackward(cudaStream_t s, int64_t rows, int dim, const float* x,
                              const float* gamma, const float* mean, const float* rstd,
                              const float* dy, float* dx, float* dgamma, float* dbeta);
cudaError_t SoftmaxRows(cudaStream_t s, int64_t rows, int cols, float scale, const float* x,
                        float* y);
cudaError_t SoftmaxRowsBackward(cudaStream_t s, int64_t rows, int cols, float scale, const float* y,
                                const float* dy, float* dx);
cudaError_t CrossEntropy(cudaStream_t s, int64_t rows, int classes, const float* logits,
                         const int32_t* labels, float grad_scale, float* loss, int32_t* correct,
                         float* dlogits);
cudaError_t Dropout(cudaStream_t s, int64_t n, float p, uint64_t key, int64_t offset,
                    const float* x, float* y);
cudaError_t Axpy(cudaStream_t s, int64_t n, float alpha, const float* x, float* y);
cudaError_t Axpby(cudaStream_t s, int64_t n, float alpha, const float* x, float beta, float* y);
cudaError_t Copy2D(cudaStream_t s, int64_t rows, int cols, const float* src, int64_t ld_src,
                   float* dst, int64_t ld_dst);
cudaError_t ExtractPatches(cudaStream_t s, int n, int channels, int height, int width, int p,
                           const float* images, float* patches);
cudaError_t HeadsToBatch(cudaStream_t s, int n, int tokens, int heads, int dh, const float* x,
                         int64_t ldx, float* y);
cudaError_t BatchToHeads(cudaStream_t s, int n, int tokens, int heads, int dh, const float* y,
                         float* x, int64_t ldx);
cudaError_t SgdUpdate(cudaStream_t s, int64_t n, float lr, float momentum, float weight_decay,
                      float grad_scale, float* param, const float* grad, float* velocity);
cudaError_t AdamWUpdate(cudaStream_t s, int64_t n, float lr, float beta1, float beta2, float eps,
                        float weight_decay, float bias1, float bias2, float grad_scale,
                        float* param, const float* grad, float* m, float* v);
// Leaves the sum of x[i]^2 in partials[0] (partials: kSumBlocks doubles).
cudaError_t SumSquares(cudaStream_t s, int64_t n, const float* x, double* partials);

}  // namespace strait::cuda
