// The CPU backend's loops on f32 buffers (cpu_backend.cc adapts typed tensors to them). Each has
// the semantics of the Backend op of the same name (site/backend/backend.h) on f32 tensors and
// runs on `pool`; element-wise and row-wise loops give the same bits for any thread count, matrix
// products for a given thread count.
#pragma once

#include <cstdint>

#include "site/backend/backend.h"
#include "site/backend/cpu/thread_pool.h"

namespace strait::site::cpu {

void Gemm(ThreadPool& pool, bool ta, bool tb, int m, int n, int k, float alpha, const float* a,
          int lda, const float* b, int ldb, float beta, float* c, int ldc);
void GemmBatched(ThreadPool& pool, bool ta, bool tb, int m, int n, int k, float alpha,
                 const float* a, int lda, int64_t stride_a, const float* b, int ldb,
                 int64_t stride_b, float beta, float* c, int ldc, int64_t stride_c, int batch);
// x = RoundToBf16(x), in place.
void RoundToBf16InPlace(ThreadPool& pool, int64_t n, float* x);

void BiasActivation(ThreadPool& pool, int64_t rows, int cols, const float* bias, ActivationOp act,
                    float* x, float* y);
void ActivationBackward(ThreadPool& pool, int64_t n, ActivationOp act, const float* x,
                        const float* dy, float* dx);
void ColumnSum(ThreadPool& pool, int64_t rows, int cols, const float* x, int64_t ldx, float beta,
               float* out);
void LayerNormForward(ThreadPool& pool, int64_t rows, int dim, const float* x, const float* gamma,
                      const float* beta, float* y, float* mean, float* rstd);
void LayerNormBackward(ThreadPool& pool, int64_t rows, int dim, const float* x, const float* gamma,
                       const float* mean, const float* rstd, const float* dy, float* dx,
                       float* dgamma, float* dbeta);
void SoftmaxRows(ThreadPool& pool, int64_t rows, int cols, float scale, bool causal, const float* x,
                 float* y);
void SoftmaxRowsBackward(ThreadPool& pool, int64_t rows, int cols, float scale, const float* y,
                         const float* dy, float* dx);
void ClassifierLoss(ThreadPool& pool, int64_t rows, int classes, float* logits,
                    const int32_t* labels, float grad_scale, float* loss, int32_t* correct);
void Dropout(ThreadPool& pool, int64_t n, float p, uint64_t key, int64_t offset, const float* x,
             float* y);
void Axpy(ThreadPool& pool, int64_t n, float alpha, const float* x, float* y);
void Axpby(ThreadPool& pool, int64_t n, float alpha, const float* x, float beta, float* y);
void EmbeddingBackward(int64_t rows, int dim, int vocab, const float* ids, const float* dy,
                       float* dtable);
void SgdUpdate(ThreadPool& pool, int64_t n, float lr, float momentum, float weight_decay,
               float grad_scale, float* param, const float* grad, float* velocity);
void AdamWUpdate(ThreadPool& pool, int64_t n, float lr, float beta1, float beta2, float eps,
                 float weight_decay, float bias1, float bias2, float grad_scale, float* param,
                 const float* grad, float* m, float* v);
double SumSquares(ThreadPool& pool, int64_t n, const float* x);

}  // namespace strait::site::cpu
