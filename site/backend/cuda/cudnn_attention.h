// Scaled-dot-product ("flash") attention, forward and backward, in bf16 through cuDNN 9's backend
// (graph) C API: no cudnn-frontend. One CudnnAttention per stream; plans are built once per shape.
//
// Route: the attention is described to cuDNN the way cudnn-frontend's CompositeSDPANode and
// CompositeSDPABackwardNode lower it
// (include/cudnn_frontend/node/scaled_dot_product_flash_attention.h, softmax.h,
// diagonal_band_mask.h, utils/attn_score_modifiers.h in github.com/NVIDIA/cudnn-frontend): a graph
// of primitive operations (matmul Q.K^T, pointwise scale, GEN_INDEX + CMP_GE + BINARY_SELECT(-inf)
// for the causal mask, reduction max, sub, exp, reduction sum, log + add for the stats, div, matmul
// with V; and the matching backward graph) that cuDNN's fused flash-attention engines
// pattern-match. The native CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD_DESCRIPTOR route was rejected: in
// cuDNN 9.19 its attributes (cudnn_graph_v9.h: Q, K, V, O, STATS, SCALE, BLOCK_MASK,
// PAGE_TABLE_K/V, SEQ_LEN_Q/KV) cannot express a causal mask. The frontend's own support surface
// (node/sdpa_support_surface.h, UNIFIED implementation) says "Left bound or right bound for unified
// SDPA node requires cuDNN 9.21.0", and the mask subgraph / DIAGONAL_BAND_MASK descriptor it uses
// for that arrive in 9.20 / 9.21 (absent from the 9.19 header). The composite graph is what the
// frontend, PyTorch and TransformerEngine have sent to cuDNN 9.0 through 9.20 for causal training,
// and it runs on sm_80 and sm_90.
//
// Backward determinism: on Hopper the frontend gets deterministic dQ by writing dQ straight from
// the dS.K matmul (the "dP workspace" variant, whose workspace grows as n*heads*tokens^2*2 bytes)
// instead of accumulating into an fp32 dQ buffer with atomics. This class tries that variant first
// and falls back to the fp32-accumulator variant when cuDNN has no engine for it or its workspace
// passes kMaxDeterministicWorkspaceBytes (in the .cc). STRAIT_CUDNN_ATTENTION_DETERMINISTIC=0 in
// the environment (read by Create) skips it; STRAIT_CUDNN_ATTENTION_VERBOSE=1 prints each plan
// built.
//
// The stream passed to Create must outlive the object. Build the plans (Supports, or one call)
// before capturing the stream into a CUDA graph: growing the workspace synchronizes the stream.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct cudnnContext;  // cudnnHandle_t is cudnnContext*; <cudnn.h> stays out of this header.

namespace strait::site {

// Shapes of one attention call. The layouts are those a fused qkv projection writes:
//   qkv  [n, tokens, 3, heads, dh] bf16  (row (b, t) of width 3*heads*dh: every head's query, then
//        every head's key, then every head's value)
//   out  [n, tokens, heads, dh]    bf16  (row (b, t) of width heads*dh)
//   lse  [n, heads, tokens]        f32   natural-log sum-exp of the scaled scores of each query row
//        (the softmax "stats")
//   dout like out, dqkv like qkv (dq, dk, dv written into their thirds; overwritten)
// dh must be a multiple of 8, at most 256. Every pointer must be 16-byte aligned.
struct CudnnAttentionShape {
  int n, tokens, heads, dh;
  float scale;
  bool causal;
};

class CudnnAttention {
 public:
  // Makes a cuDNN handle bound to `stream` (the caller's, not owned). Fails (FailedPrecondition)
  // when cuDNN cannot be loaded or the device is older than sm_80.
  static absl::StatusOr<std::unique_ptr<CudnnAttention>> Create(cudaStream_t stream);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // Whether cuDNN has an engine for this shape, forward and backward (built and cached on first
  // use; later calls with the same shape reuse the plan). Cheap after the first call.
  bool Supports(const CudnnAttentionShape& s);

  // Queue forward/backward on the stream. Plans are built once per shape (cache keyed by all
  // fields of the shape and the pass), the workspace grows as needed (cudaMalloc after a stream
  // sync; freed in the destructor).
  absl::Status Forward(const CudnnAttentionShape& s, const void* qkv, void* out, float* lse);
  absl::Status Backward(const CudnnAttentionShape& s, const void* qkv, const void* out,
                        const float* lse, const void* dout, void* dqkv);

 private:
  struct Plan;  // A finalized execution plan and everything it references (defined in the .cc).
  enum class Pass { kForward, kBackward };
  // (n, tokens, heads, dh, bits of scale, causal, pass).
  using PlanKey = std::tuple<int, int, int, int, uint32_t, bool, int>;

  CudnnAttention(cudnnContext* handle, cudaStream_t stream, bool deterministic, bool verbose,
                 float mask_value);

  // The cached plan for (s, pass), built on first use; a failed build is cached too. mu_ held.
  absl::StatusOr<Plan*> GetPlan(const CudnnAttentionShape& s, Pass pass);
  // Grows workspace_ to at least `bytes`. mu_ held.
  absl::Status EnsureWorkspace(size_t bytes);

  cudnnContext* handle_;
  cudaStream_t stream_;
  bool deterministic_;  // try the deterministic backward graph first
  bool verbose_;        // print each plan built to stderr
  float mask_value_;    // what the causal mask writes: -inf (cuDNN >= 9.10) or the lowest float

  std::mutex mu_;
  std::map<PlanKey, std::unique_ptr<Plan>> plans_;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace strait::site
