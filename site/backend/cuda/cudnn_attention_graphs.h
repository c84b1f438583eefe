// The operation graphs of CudnnAttention (cudnn_attention.h): scaled-dot-product attention forward
// and backward as cudnn-frontend lowers them, built into a GraphBuilder (cudnn_graph.h), and the
// unique ids by which the caller binds its tensors to an execution. Host code, for
// cudnn_attention.cc; the builder is the caller's.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "site/backend/cuda/cudnn_attention.h"
#include "site/backend/cuda/cudnn_graph.h"

namespace strait::site::cudnn_attention_internal {

// Unique ids of the non-virtual tensors (virtual ones count up from
// GraphBuilder::kFirstVirtualUid).
inline constexpr int64_t kUidQ = 1;
inline constexpr int64_t kUidK = 2;  // K^T view in both graphs
inline constexpr int64_t kUidV = 3;  // V in the forward, V^T view in the backward
inline constexpr int64_t kUidO = 4;
inline constexpr int64_t kUidStats = 5;
inline constexpr int64_t kUidScale = 6;
inline constexpr int64_t kUidMaskValue = 7;  // only when causal
inline constexpr int64_t kUidDO = 8;
inline constexpr int64_t kUidDQ = 9;
inline constexpr int64_t kUidDK = 10;
inline constexpr int64_t kUidDV = 11;
inline constexpr int64_t kUidOne = 12;
inline constexpr int64_t kUidSoftmaxSum = 13;  // backward: rowsum(dO * O), in the workspace
inline constexpr int64_t kUidDQAccum = 14;     // non-deterministic backward: fp32 dQ accumulator

// O = softmax(scale * Q K^T [masked]) V and Stats = max + log(sum exp(. - max)), as
// CompositeSDPANode + CompositeSoftmaxNode (with stats) lower it.
absl::Status BuildForwardGraph(GraphBuilder& g, const CudnnAttentionShape& s);

// dQ, dK, dV from Q, K, V, O, dO and Stats, as CompositeSDPABackwardNode lowers it (MHA, no
// dropout, no bias). `deterministic`: dQ straight from the dS K matmul (the frontend's
// use_dp_workspace variant, which it picks on Hopper for set_deterministic_algorithm(true));
// otherwise into the fp32 accumulator dQ_accum, then an identity to dQ.
absl::Status BuildBackwardGraph(GraphBuilder& g, const CudnnAttentionShape& s, bool deterministic);

}  // namespace strait::site::cudnn_attention_internal
