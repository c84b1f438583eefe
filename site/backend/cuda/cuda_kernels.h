// Launchers of the CUDA backend's kernels: LaunchX queues the kernel of the Backend op X (one per
// op that is not a cuBLAS call) on `stream` and returns cudaGetLastError(). Pointers are device
// memory; shapes and semantics are those of the op (site/backend/backend.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "site/backend/backend.h"

namespace strait::site {

// Doubles of device scratch that SumSquares needs.
inline constexpr int kSumSquaresBlocks = 256;

cudaError_t LaunchFill(cudaStream_t s, float* x, int64_t n, float value);
// y[i] = RoundToBf16(x[i]) (op_math.h).
cudaError_t LaunchRoundToBf16(cudaStream_t s, const float* x, int64_t n, float* y);
cudaError_t LaunchBiasActivation(cudaStream_t s, int64_t rows, int cols, const float* bias,
                                 ActivationOp act, float* x, float* y);
cudaError_t LaunchActivationBackward(cudaStream_t s, int64_t n, ActivationOp act, const float* x,
                                     const float* dy, float* dx);
cudaError_t LaunchColumnSum(cudaStream_t s, int64_t rows, int cols, const float* x, int64_t ldx,
                            float beta, float* out);
cudaError_t LaunchLayerNormForward(cudaStream_t s, int64_t rows, int dim, const float* x,
                                   const float* gamma, const float* beta, float* y, float* mean,
                                   float* rstd);
cudaError_t LaunchLayerNormBackward(cudaStream_t s, int64_t rows, int dim, const float* x,
                                    const float* gamma, const float* mean, const float* rstd,
                                    const float* dy, float* dx, float* dgamma, float* dbeta);
cudaError_t LaunchSoftmaxRows(cudaStream_t s, int64_t rows, int cols, float scale, bool causal,
                              const float* x, float* y);
cudaError_t LaunchEmbeddingLookup(cudaStream_t s, int64_t rows, int dim, int vocab,
                                  const float* ids, const float* table, float* y);
cudaError_t LaunchEmbeddingBackward(cudaStream_t s, int64_t rows, int dim, int vocab,
                                    const float* ids, const float* dy, float* dtable);
cudaError_t LaunchSoftmaxRowsBackward(cudaStream_t s, int64_t rows, int cols, float scale,
                                      const float* y, const float* dy, float* dx);
cudaError_t LaunchCrossEntropy(cudaStream_t s, int64_t rows, int classes, const float* logits,
                               const int32_t* labels, float grad_scale, float* loss,
                               int32_t* correct, float* dlogits);
cudaError_t LaunchDropout(cudaStream_t s, int64_t n, float p, uint64_t key, int64_t offset,
                          const float* x, float* y);
cudaError_t LaunchAxpy(cudaStream_t s, int64_t n, float alpha, const float* x, float* y);
cudaError_t LaunchAxpby(cudaStream_t s, int64_t n, float alpha, const float* x, float beta,
                        float* y);
cudaError_t LaunchCopy2D(cudaStream_t s, int64_t rows, int cols, const float* src, int64_t ld_src,
                         float* dst, int64_t ld_dst);
cudaError_t LaunchExtractPatches(cudaStream_t s, int n, int channels, int height, int width, int p,
                                 const float* images, float* patches);
cudaError_t LaunchHeadsToBatch(cudaStream_t s, int n, int tokens, int heads, int dh, const float* x,
                               int64_t ldx, float* y);
cudaError_t LaunchBatchToHeads(cudaStream_t s, int n, int tokens, int heads, int dh, const float* y,
                               float* x, int64_t ldx);
cudaError_t LaunchSgdUpdate(cudaStream_t s, int64_t n, float lr, float momentum, float weight_decay,
                            float grad_scale, float* param, const float* grad, float* velocity);
cudaError_t LaunchAdamWUpdate(cudaStream_t s, int64_t n, float lr, float beta1, float beta2,
                              float eps, float weight_decay, float bias1, float bias2,
                              float grad_scale, float* param, const float* grad, float* m,
                              float* v);
// Leaves the sum of x[i]^2 in partials[0] (partials: kSumSquaresBlocks doubles).
cudaError_t LaunchSumSquares(cudaStream_t s, int64_t n, const float* x, double* partials);

}  // namespace strait::site
