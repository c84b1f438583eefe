// Multi-head self-attention core (no projections): softmax(Q K^T / sqrt(dh)) V per head, with a
// causal mask when asked (the masked probabilities are 0, so the backward needs no mask). Either
// through batched products and a saved [T, T] probability matrix per head, or through the backend's
// fused ops, which save only each query's log-sum-exp (AttentionKernel).
// Used by the transformer block, which owns the qkv and output projections.
#pragma once

#include <cstdint>

#include "site/backend/backend.h"

namespace strait::site {

struct AttentionShape {
  int n = 0;            // samples
  int tokens = 0;       // T
  int heads = 0;        // H
  int dh = 0;           // per-head width; model width D = heads * dh
  bool causal = false;  // token t attends to tokens 0..t only (a language model)
  bool fused = false;   // Backend::FusedAttention(dh) ops rather than batched products
  int64_t dim() const { return int64_t{heads} * dh; }
  int64_t rows() const { return int64_t{n} * tokens; }
};

// Floats AttentionForward keeps for the backward (Q, K, V and the probabilities; fused: Q, K, V,
// the output and a log-sum-exp per query).
int64_t AttentionSavedFloats(const AttentionShape& s);
// Temporary floats needed by AttentionForward or AttentionBackward.
int64_t AttentionScratchFloats(const AttentionShape& s);

// qkv: [n * T, 3D] (Q, K, V side by side per token) -> out: [n * T, D] (heads side by side).
void AttentionForward(Backend& backend, const AttentionShape& s, const float* qkv, float* out,
                      float* saved, float* scratch);

// dout: [n * T, D] -> dqkv: [n * T, 3D] (overwritten).
void AttentionBackward(Backend& backend, const AttentionShape& s, const float* saved,
                       const float* dout, float* dqkv, float* scratch);

}  // namespace strait::site
