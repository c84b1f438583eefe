// Launchers of the fused self-attention kernels (Backend::FusedAttentionForward / Backward): the
// score matrix of a head lives only in registers, a tile of keys at a time, with the online
// softmax's running maximum and sum; the backward recomputes it from the forward's log-sum-exp.
// Queued on `stream`; they return cudaGetLastError(), or cudaErrorInvalidValue for a head width
// other than a multiple of 8 up to kFusedAttentionMaxHeadDim or rows that are not 16-byte aligned.
#pragma once

#include <cuda_runtime.h>

namespace strait::site {

cudaError_t LaunchFusedAttentionForward(cudaStream_t s, int batch, int tokens, int dh, float scale,
                                        bool causal, bool bf16, const float* q, const float* k,
                                        const float* v, float* o, float* lse);

cudaError_t LaunchFusedAttentionBackward(cudaStream_t s, int batch, int tokens, int dh, float scale,
                                         bool causal, bool bf16, const float* q, const float* k,
                                         const float* v, const float* o, const float* lse,
                                         const float* d_o, float* delta, float* dq, float* dk,
                                         float* dv);

}  // namespace strait::site
