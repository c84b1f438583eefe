// Launchers of the fused f32 self-attention kernels (Backend::FusedAttentionForward / Backward on
// f32 tensors; bf16 goes to cuDNN): the score matrix of a head lives only in registers, a tile of
// kFusedAttentionKeyTile keys at a time, with the online softmax's running maximum and sum; the
// backward recomputes it from the forward's log-sum-exp. The tensors are in the model's layout
// (AttentionDims, site/backend/backend.h): qkv [n * tokens, 3 * heads * dh] (per token every
// head's query, then every head's key, then every head's value), out / dout [n * tokens,
// heads * dh], lse / delta [n, heads, tokens]; the kernels address a head's rows in place.
// Queued on `stream`; they return cudaGetLastError(), or cudaErrorInvalidValue for a head width
// that FusedAttentionTakes rejects (multiples of 8 up to kFusedAttentionMaxHeadDim = 128 run),
// tensors that are not 16-byte aligned, or more than 65535 * 64 tokens.
#pragma once

#include <cuda_runtime.h>

#include "site/backend/backend.h"

namespace strait::site {

// out = softmax(scale * q k^T) v per head; lse[b, h, t] = the log of the softmax's denominator.
cudaError_t LaunchFusedAttentionForward(cudaStream_t s, const AttentionDims& d, const float* qkv,
                                        float* out, float* lse);

// dqkv (overwritten, qkv's layout) from dout and the forward's qkv, out and lse; delta
// [n, heads, tokens] is scratch (rowsum(dout * out)).
cudaError_t LaunchFusedAttentionBackward(cudaStream_t s, const AttentionDims& d, const float* qkv,
                                         const float* out, const float* lse, const float* dout,
                                         float* delta, float* dqkv);

}  // namespace strait::site
