// The CPU backend's fused self-attention (Backend::FusedAttentionForward / Backward): the reference
// the CUDA kernels are tested against. It takes the same steps as they do: the online softmax
// rescales after every kFusedAttentionKeyTile keys, and under bf16 the same values are rounded.
#pragma once

#include "site/backend/cpu/thread_pool.h"

namespace strait::site {

void CpuFusedAttentionForward(ThreadPool& pool, int batch, int tokens, int dh, float scale,
                              bool causal, bool bf16, const float* q, const float* k,
                              const float* v, float* o, float* lse);

void CpuFusedAttentionBackward(ThreadPool& pool, int batch, int tokens, int dh, float scale,
                               bool causal, bool bf16, const float* q, const float* k,
                               const float* v, const float* o, const float* lse, const float* d_o,
                               float* delta, float* dq, float* dk, float* dv);

}  // namespace strait::site
