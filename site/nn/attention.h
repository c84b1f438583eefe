// Multi-head self-attention core (no projections): softmax(Q K^T / sqrt(dh)) V per head, with a
// causal mask when asked (the masked probabilities are 0, so the backward needs no mask). Either
// through the backend's fused ops, which keep only each query's log-sum-exp, or through batched
// products and a saved [T, T] probability matrix per head (AttentionKernel).
// Used by the transformer block, which owns the qkv and output projections and keeps qkv and the
// output for the backward itself.
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
  AttentionDims Dims() const;
};

// Bytes AttentionForward keeps for the backward besides qkv and out (fused: a log-sum-exp per
// query; batched: the probabilities), and the scratch bytes either pass needs; `act` is the
// activations' type.
int64_t AttentionSavedBytes(const AttentionShape& s, DType act);
int64_t AttentionScratchBytes(const AttentionShape& s, DType act);

// qkv: [n * T, 3D] (every head's Q, then K, then V per token) -> out: [n * T, D] (heads side by
// side).
void AttentionForward(Backend& backend, const AttentionShape& s, ConstTypedPtr qkv, TypedPtr out,
                      void* saved, void* scratch);

// dout: [n * T, D] -> dqkv: [n * T, 3D] (overwritten). qkv and out are the forward's.
void AttentionBackward(Backend& backend, const AttentionShape& s, ConstTypedPtr qkv,
                       ConstTypedPtr out, const void* saved, ConstTypedPtr dout, TypedPtr dqkv,
                       void* scratch);

}  // namespace strait::site
