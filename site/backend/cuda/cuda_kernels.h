// Launchers of the CUDA backend's kernels: LaunchX queues the kernel(s) of the Backend op X (one
// per op that is not a library call) on `stream` and returns cudaGetLastError(). Pointers are
// device memory; shapes and semantics are those of the op (site/backend/backend.h): typed tensors
// are read, computed on in f32 and rounded once when stored. Row kernels give one warp (or block)
// to a row and move 16 bytes per load where the row allows it; reductions over rows run in a fixed
// order (per-chunk partial sums in `partials`, then the chunks in order), so every result is
// deterministic. `partials` is device scratch of at least PartialFloats(...) floats.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "site/backend/backend.h"

namespace strait::site {

// Doubles of device scratch that SumSquares needs.
inline constexpr int kSumSquaresBlocks = 256;
// Rows per chunk of the column reductions (ColumnSum, LayerNorm's dgamma/dbeta, the epilogue's
// bias gradient): a column's sum is the chunks' partial sums added in order.
inline constexpr int kColumnChunkRows = 256;
// Floats of `partials` a column reduction of rows x cols needs (2x for LayerNormBackward).
inline int64_t PartialFloats(int64_t rows, int64_t cols) {
  return ((rows + kColumnChunkRows - 1) / kColumnChunkRows) * cols;
}

cudaError_t LaunchFill(cudaStream_t s, TypedPtr x, int64_t n, float value);
cudaError_t LaunchConvert(cudaStream_t s, int64_t n, ConstTypedPtr x, TypedPtr y);

// The epilogue of a product whose f32 result t [m, n] (leading dimension n, packed) is in scratch:
// stores C (ld ldc, its type) and the GemmEpilogue's outputs. For products cuBLASLt cannot fuse.
cudaError_t LaunchGemmEpilogue(cudaStream_t s, int m, int n, const float* t, int ldc,
                               const GemmEpilogue& e, TypedPtr c, float* partials);

cudaError_t LaunchBiasActivation(cudaStream_t s, int64_t rows, int cols, const float* bias,
                                 ActivationOp act, TypedPtr x, TypedPtr y);
cudaError_t LaunchActivationBackward(cudaStream_t s, int64_t n, ActivationOp act, ConstTypedPtr x,
                                     ConstTypedPtr dy, TypedPtr dx);
cudaError_t LaunchColumnSum(cudaStream_t s, int64_t rows, int cols, ConstTypedPtr x, int64_t ldx,
                            float beta, float* out, float* partials);
cudaError_t LaunchLayerNormForward(cudaStream_t s, int64_t rows, int dim, ConstTypedPtr x,
                                   const float* gamma, const float* beta, TypedPtr y, float* mean,
                                   float* rstd);
cudaError_t LaunchResidualLayerNormForward(cudaStream_t s, int64_t rows, int dim, ConstTypedPtr x,
                                           ConstTypedPtr branch, TypedPtr r, const float* gamma,
                                           const float* beta, TypedPtr y, float* mean, float* rstd);
// partials: 2 * PartialFloats(rows, dim).
cudaError_t LaunchLayerNormBackward(cudaStream_t s, int64_t rows, int dim, ConstTypedPtr x,
                                    const float* gamma, const float* mean, const float* rstd,
                                    ConstTypedPtr dy, TypedPtr dx, float* dgamma, float* dbeta,
                                    float* partials);
// LLaMA's ops (llama_kernels.cu). partials: PartialFloats(rows, dim).
cudaError_t LaunchRmsNormForward(cudaStream_t s, int64_t rows, int dim, float eps, ConstTypedPtr x,
                                 const float* gamma, TypedPtr y, float* rstd);
cudaError_t LaunchRmsNormBackward(cudaStream_t s, int64_t rows, int dim, ConstTypedPtr x,
                                  const float* gamma, const float* rstd, ConstTypedPtr dy,
                                  TypedPtr dx, float* dgamma, float* partials);
cudaError_t LaunchRotary(cudaStream_t s, int64_t rows, int tokens, int heads, int dh, double theta,
                         bool inverse, TypedPtr x, int64_t ldx);
cudaError_t LaunchSwiGluForward(cudaStream_t s, int64_t rows, int f, ConstTypedPtr gate_up,
                                TypedPtr y);
cudaError_t LaunchSwiGluBackward(cudaStream_t s, int64_t rows, int f, ConstTypedPtr gate_up,
                                 ConstTypedPtr dy, TypedPtr dgate_up);
cudaError_t LaunchRepeatKvHeads(cudaStream_t s, int64_t rows, int heads, int kv_heads, int dh,
                                ConstTypedPtr qkv, TypedPtr full);
cudaError_t LaunchSumKvHeads(cudaStream_t s, int64_t rows, int heads, int kv_heads, int dh,
                             ConstTypedPtr dfull, TypedPtr dqkv);
cudaError_t LaunchSoftmaxRows(cudaStream_t s, int64_t rows, int cols, float scale, bool causal,
                              ConstTypedPtr x, TypedPtr y);
cudaError_t LaunchSoftmaxRowsBackward(cudaStream_t s, int64_t rows, int cols, float scale,
                                      ConstTypedPtr y, ConstTypedPtr dy, TypedPtr dx);
cudaError_t LaunchClassifierLoss(cudaStream_t s, int64_t rows, int classes, TypedPtr logits,
                                 const int32_t* labels, float grad_scale, float* loss,
                                 int32_t* correct);
cudaError_t LaunchDropout(cudaStream_t s, int64_t n, float p, uint64_t key, int64_t offset,
                          ConstTypedPtr x, TypedPtr y);
cudaError_t LaunchAxpy(cudaStream_t s, int64_t n, float alpha, ConstTypedPtr x, TypedPtr y);
cudaError_t LaunchAxpby(cudaStream_t s, int64_t n, float alpha, ConstTypedPtr x, float beta,
                        TypedPtr y);
cudaError_t LaunchCopy2D(cudaStream_t s, int64_t rows, int cols, ConstTypedPtr src, int64_t ld_src,
                         TypedPtr dst, int64_t ld_dst);
cudaError_t LaunchExtractPatches(cudaStream_t s, int n, int channels, int height, int width, int p,
                                 ConstTypedPtr images, TypedPtr patches);
cudaError_t LaunchHeadsToBatch(cudaStream_t s, int n, int tokens, int heads, int dh,
                               ConstTypedPtr x, int64_t ldx, TypedPtr y);
cudaError_t LaunchBatchToHeads(cudaStream_t s, int n, int tokens, int heads, int dh,
                               ConstTypedPtr y, TypedPtr x, int64_t ldx);
cudaError_t LaunchEmbeddingLookup(cudaStream_t s, int64_t rows, int dim, int vocab,
                                  const float* ids, const float* table, TypedPtr y);
cudaError_t LaunchEmbeddingBackward(cudaStream_t s, int64_t rows, int dim, int vocab,
                                    const float* ids, ConstTypedPtr dy, float* dtable);
cudaError_t LaunchSgdUpdate(cudaStream_t s, int64_t n, float lr, float momentum, float weight_decay,
                            float grad_scale, float* param, const float* grad, float* velocity,
                            TypedPtr param_copy);
cudaError_t LaunchAdamWUpdate(cudaStream_t s, int64_t n, float lr, float beta1, float beta2,
                              float eps, float weight_decay, float bias1, float bias2,
                              float grad_scale, float* param, const float* grad, float* m, float* v,
                              TypedPtr param_copy);
// Leaves the sum of x[i]^2 in partials[0] (partials: kSumSquaresBlocks doubles).
cudaError_t LaunchSumSquares(cudaStream_t s, int64_t n, const float* x, double* partials);

}  // namespace strait::site
