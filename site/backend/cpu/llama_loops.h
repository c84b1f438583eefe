// The CPU backend's loops for LLaMA's ops (site/backend/backend.h: RmsNorm*, Rotary, SwiGlu*,
// RepeatKvHeads, SumKvHeads) on f32 buffers; cpu_backend.cc adapts typed tensors to them. Row-wise
// loops give the same bits for any thread count (dgamma sums rows in order).
#pragma once

#include <cstdint>

#include "site/backend/cpu/thread_pool.h"

namespace strait::site::cpu {

void RmsNormForward(ThreadPool& pool, int64_t rows, int dim, float eps, const float* x,
                    const float* gamma, float* y, float* rstd);
void RmsNormBackward(ThreadPool& pool, int64_t rows, int dim, const float* x, const float* gamma,
                     const float* rstd, const float* dy, float* dx, float* dgamma);
// x: rows of stride ldx, `heads` heads of width dh from column 0.
void Rotary(ThreadPool& pool, int64_t rows, int tokens, int heads, int dh, double theta,
            bool inverse, float* x, int64_t ldx);
void SwiGluForward(ThreadPool& pool, int64_t rows, int f, const float* gate_up, float* y);
void SwiGluBackward(ThreadPool& pool, int64_t rows, int f, const float* gate_up, const float* dy,
                    float* dgate_up);
void RepeatKvHeads(ThreadPool& pool, int64_t rows, int heads, int kv_heads, int dh,
                   const float* qkv, float* full);
void SumKvHeads(ThreadPool& pool, int64_t rows, int heads, int kv_heads, int dh, const float* dfull,
                float* dqkv);

}  // namespace strait::site::cpu
