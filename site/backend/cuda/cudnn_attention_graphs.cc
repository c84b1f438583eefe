// The attention graphs of cudnn_attention_graphs.h. They mirror, operation by operation and tensor
// by tensor (dims, strides, data types, virtual flags), what cudnn-frontend's CompositeSDPANode /
// CompositeSDPABackwardNode send to cuDNN 9.10-9.20 for a bf16 training SDPA with a scale tensor,
// an optional top-left causal mask, no bias, no dropout, no padding (github.com/NVIDIA/
// cudnn-frontend, include/cudnn_frontend/node/scaled_dot_product_flash_attention.h and the nodes it
// expands into). Conventions taken from there:
//  * io tensors are bf16; every virtual (intermediate) tensor is fp32 unless noted (the frontend's
//    Tensor_attributes::fill_from_context: virtual -> intermediate type FLOAT, else io type);
//    every compute type is FLOAT except the comparison of the causal mask (BOOLEAN).
//  * the backend wants K^T (and V^T in the backward) as [n, h, dh, s_kv] views: K's dims and
//    strides with the last two swapped.
//  * the softmax input of the second matmul, and the transposed P / dS fed to the dV / dK matmuls,
//    are virtual tensors of the io type (bf16): "Requirement by cudnn backend to take in bmm2 aType
//    as i/o type".
//  * scalars (attention scale, mask value -inf, 1.0) are pass-by-value fp32 [1,1,1,1] tensors whose
//    variant-pack pointer is a host pointer to the value.
//  * pointwise inputs IN_0/IN_1/IN_2 are XDESC/BDESC/TDESC; BINARY_SELECT(x, b, t) keeps x where t.
//  * the backward's softmax_sum (rowsum(dO*O)) and, in the non-deterministic variant, the fp32 dQ
//    accumulator are non-virtual tensors the caller places in its workspace (the frontend's
//    collect_tensors_in_workspace_node); since cuDNN 9.6 the accumulator needs no memset by the
//    caller, cudnn_attention.cc zeroes it anyway.
// Each operation's output is made just before it (virtual tensors take their uids in that order).
#include "site/backend/cuda/cudnn_attention_graphs.h"

#include <cudnn.h>

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/status.h"
#include "site/backend/cuda/cudnn_graph.h"

namespace strait::site::cudnn_attention_internal {
namespace {

constexpr cudnnDataType_t kBf16 = CUDNN_DATA_BFLOAT16;
constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;

// The tensors of one shape as [n, heads, rows, cols] 4-D tensors.
struct Layout {
  int64_t n, h, t, d;
  Dims qkv_dims, qkv_strides;        // Q, K, V, dQ, dK, dV: [n, h, t, d] views of the qkv rows
  Dims qkv_t_dims, qkv_t_strides;    // K^T, V^T: [n, h, d, t]
  Dims o_dims, o_strides;            // O, dO: [n, h, t, d] views of the out rows
  Dims scores_dims, scores_strides;  // [n, h, t, t] packed
  Dims scores_t_strides;             // the same dims, transposed strides (P^T, dS^T)
  Dims rows_dims, rows_strides;      // [n, h, t, 1] packed (stats, row max, row sums)

  TensorSpec Qkv(absl::string_view name, cudnnDataType_t type = kBf16) const {
    return {name, type, qkv_dims, qkv_strides};
  }
  TensorSpec QkvT(absl::string_view name) const { return {name, kBf16, qkv_t_dims, qkv_t_strides}; }
  TensorSpec Out(absl::string_view name) const { return {name, kBf16, o_dims, o_strides}; }
  TensorSpec Scores(absl::string_view name, cudnnDataType_t type = kF32) const {
    return {name, type, scores_dims, scores_strides};
  }
  TensorSpec ScoresT(absl::string_view name) const {
    return {name, kBf16, scores_dims, scores_t_strides};
  }
  TensorSpec Rows(absl::string_view name) const { return {name, kF32, rows_dims, rows_strides}; }
};

Layout MakeLayout(const CudnnAttentionShape& s) {
  Layout l;
  l.n = s.n;
  l.h = s.heads;
  l.t = s.tokens;
  l.d = s.dh;
  const int64_t qkv_row = 3 * l.h * l.d;  // elements per token in qkv
  const int64_t o_row = l.h * l.d;        // elements per token in out
  l.qkv_dims = {l.n, l.h, l.t, l.d};
  l.qkv_strides = {l.t * qkv_row, l.d, qkv_row, 1};
  l.qkv_t_dims = {l.n, l.h, l.d, l.t};
  l.qkv_t_strides = {l.t * qkv_row, l.d, 1, qkv_row};
  l.o_dims = {l.n, l.h, l.t, l.d};
  l.o_strides = {l.t * o_row, l.d, o_row, 1};
  l.scores_dims = {l.n, l.h, l.t, l.t};
  l.scores_strides = {l.h * l.t * l.t, l.t * l.t, l.t, 1};
  l.scores_t_strides = {l.h * l.t * l.t, l.t * l.t, 1, l.t};
  l.rows_dims = {l.n, l.h, l.t, 1};
  l.rows_strides = {l.h * l.t, l.t, 1, 1};
  return l;
}

// The top-left causal mask of cudnn-frontend's CompositeDiagonalBandMaskNode with right bound 0:
// keep score (row, col) where row >= col, else the pass-by-value mask value (-inf).
absl::StatusOr<cudnnBackendDescriptor_t> CausalMask(GraphBuilder& g, const Layout& l,
                                                    cudnnBackendDescriptor_t scores) {
  STRAIT_ASSIGN_OR_RETURN(auto mask_value, g.Scalar("mask value", kUidMaskValue));
  STRAIT_ASSIGN_OR_RETURN(
      auto row, g.Pointwise("row index", CUDNN_POINTWISE_GEN_INDEX, kF32, scores, nullptr, nullptr,
                            l.Scores("row index", CUDNN_DATA_INT32), /*axis=*/2));
  STRAIT_ASSIGN_OR_RETURN(
      auto col, g.Pointwise("col index", CUDNN_POINTWISE_GEN_INDEX, kF32, scores, nullptr, nullptr,
                            l.Scores("col index", CUDNN_DATA_INT32), /*axis=*/3));
  STRAIT_ASSIGN_OR_RETURN(
      auto keep, g.Pointwise("row >= col", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col,
                             nullptr, l.Scores("row >= col", CUDNN_DATA_BOOLEAN)));
  return g.Pointwise("causal select", CUDNN_POINTWISE_BINARY_SELECT, kF32, scores, mask_value, keep,
                     l.Scores("masked scores"));
}

}  // namespace

absl::Status BuildForwardGraph(GraphBuilder& g, const CudnnAttentionShape& s) {
  const Layout l = MakeLayout(s);
  STRAIT_ASSIGN_OR_RETURN(auto q, g.Io(l.Qkv("Q"), kUidQ));
  STRAIT_ASSIGN_OR_RETURN(auto kt, g.Io(l.QkvT("K^T"), kUidK));
  STRAIT_ASSIGN_OR_RETURN(auto v, g.Io(l.Qkv("V"), kUidV));
  STRAIT_ASSIGN_OR_RETURN(auto o, g.Io(l.Out("O"), kUidO));
  STRAIT_ASSIGN_OR_RETURN(auto stats, g.Io(l.Rows("Stats"), kUidStats));
  STRAIT_ASSIGN_OR_RETURN(auto scale, g.Scalar("attn scale", kUidScale));

  STRAIT_ASSIGN_OR_RETURN(auto qk, g.Matmul("bmm1 Q K^T", q, kt, l.Scores("Q K^T")));
  STRAIT_ASSIGN_OR_RETURN(
      auto scores, g.Binary("attn scale", CUDNN_POINTWISE_MUL, qk, scale, l.Scores("scores")));
  if (s.causal) {
    STRAIT_ASSIGN_OR_RETURN(scores, CausalMask(g, l, scores));
  }
  STRAIT_ASSIGN_OR_RETURN(
      auto row_max, g.Reduction("softmax max", CUDNN_REDUCE_TENSOR_MAX, scores, l.Rows("row max")));
  STRAIT_ASSIGN_OR_RETURN(auto centered, g.Binary("softmax sub", CUDNN_POINTWISE_SUB, scores,
                                                  row_max, l.Scores("scores - max")));
  STRAIT_ASSIGN_OR_RETURN(auto e,
                          g.Unary("softmax exp", CUDNN_POINTWISE_EXP, centered, l.Scores("exp")));
  STRAIT_ASSIGN_OR_RETURN(
      auto row_sum, g.Reduction("softmax sum", CUDNN_REDUCE_TENSOR_ADD, e, l.Rows("row sum")));
  STRAIT_ASSIGN_OR_RETURN(
      auto log_sum, g.Unary("softmax log", CUDNN_POINTWISE_LOG, row_sum, l.Rows("log row sum")));
  STRAIT_RETURN_IF_ERROR(g.Binary("stats", CUDNN_POINTWISE_ADD, row_max, log_sum, stats).status());
  // The probabilities feed bmm2 in the io type.
  STRAIT_ASSIGN_OR_RETURN(
      auto p, g.Binary("softmax div", CUDNN_POINTWISE_DIV, e, row_sum, l.Scores("P", kBf16)));
  return g.Matmul("bmm2 P V", p, v, o).status();
}

absl::Status BuildBackwardGraph(GraphBuilder& g, const CudnnAttentionShape& s, bool deterministic) {
  const Layout l = MakeLayout(s);
  STRAIT_ASSIGN_OR_RETURN(auto q, g.Io(l.Qkv("Q"), kUidQ));
  STRAIT_ASSIGN_OR_RETURN(auto kt, g.Io(l.QkvT("K^T"), kUidK));
  STRAIT_ASSIGN_OR_RETURN(auto vt, g.Io(l.QkvT("V^T"), kUidV));
  STRAIT_ASSIGN_OR_RETURN(auto o, g.Io(l.Out("O"), kUidO));
  STRAIT_ASSIGN_OR_RETURN(auto d_o, g.Io(l.Out("dO"), kUidDO));
  STRAIT_ASSIGN_OR_RETURN(auto stats, g.Io(l.Rows("Stats"), kUidStats));
  STRAIT_ASSIGN_OR_RETURN(auto scale, g.Scalar("attn scale", kUidScale));
  STRAIT_ASSIGN_OR_RETURN(auto one, g.Scalar("one", kUidOne));
  STRAIT_ASSIGN_OR_RETURN(auto dq, g.Io(l.Qkv("dQ"), kUidDQ));
  STRAIT_ASSIGN_OR_RETURN(auto dk, g.Io(l.Qkv("dK"), kUidDK));
  STRAIT_ASSIGN_OR_RETURN(auto dv, g.Io(l.Qkv("dV"), kUidDV));

  // softmax_sum = rowsum(dO * O) * 1 (the 1 is the frontend's dropout-scale-inverse slot), kept in
  // the caller's workspace. The strides of the dO*O intermediate are the frontend's, verbatim.
  const Dims do_o_strides = {l.h * l.t * l.d, l.t * l.d, l.h * l.d, 1};
  STRAIT_ASSIGN_OR_RETURN(auto do_o, g.Binary("mul dO O", CUDNN_POINTWISE_MUL, d_o, o,
                                              TensorSpec{"dO * O", kF32, l.o_dims, do_o_strides}));
  STRAIT_ASSIGN_OR_RETURN(auto do_o_sum, g.Reduction("reduce dO O", CUDNN_REDUCE_TENSOR_ADD, do_o,
                                                     l.Rows("rowsum(dO * O)")));
  STRAIT_ASSIGN_OR_RETURN(auto softmax_sum, g.Io(l.Rows("softmax_sum"), kUidSoftmaxSum));
  STRAIT_RETURN_IF_ERROR(
      g.Binary("scale dropout inv", CUDNN_POINTWISE_MUL, do_o_sum, one, softmax_sum).status());

  // P = exp(scale * Q K^T [masked] - Stats).
  STRAIT_ASSIGN_OR_RETURN(auto qk, g.Matmul("matmul Q K^T", q, kt, l.Scores("Q K^T")));
  STRAIT_ASSIGN_OR_RETURN(auto scores, g.Binary("mul s attn scale", CUDNN_POINTWISE_MUL, qk, scale,
                                                l.Scores("scores")));
  STRAIT_ASSIGN_OR_RETURN(auto centered, g.Binary("sub s m", CUDNN_POINTWISE_SUB, scores, stats,
                                                  l.Scores("scores - stats")));
  if (s.causal) {
    STRAIT_ASSIGN_OR_RETURN(centered, CausalMask(g, l, centered));
  }
  STRAIT_ASSIGN_OR_RETURN(auto p, g.Unary("exp s", CUDNN_POINTWISE_EXP, centered, l.Scores("P")));

  // dV = P^T dO.
  STRAIT_ASSIGN_OR_RETURN(auto p_t, g.Reshape("reshape p", p, l.ScoresT("P^T")));
  STRAIT_RETURN_IF_ERROR(g.Matmul("matmul pT dO", p_t, d_o, dv).status());

  // dS = P * (dO V^T - softmax_sum) * scale.
  STRAIT_ASSIGN_OR_RETURN(auto dp, g.Matmul("matmul dO VT", d_o, vt, l.Scores("dP")));
  STRAIT_ASSIGN_OR_RETURN(auto dp_centered, g.Binary("sub dP softmax sum", CUDNN_POINTWISE_SUB, dp,
                                                     softmax_sum, l.Scores("dP - softmax_sum")));
  STRAIT_ASSIGN_OR_RETURN(
      auto dp_p, g.Binary("mul dP exp s", CUDNN_POINTWISE_MUL, dp_centered, p, l.Scores("dP * P")));
  STRAIT_ASSIGN_OR_RETURN(
      auto ds, g.Binary("mul dS attn scale", CUDNN_POINTWISE_MUL, dp_p, scale, l.Scores("dS")));

  // dK = dS^T Q.
  STRAIT_ASSIGN_OR_RETURN(auto ds_t, g.Reshape("reshape dS", ds, l.ScoresT("dS^T")));
  STRAIT_RETURN_IF_ERROR(g.Matmul("matmul dST Q", ds_t, q, dk).status());

  // dQ = dS K, K as a reshape of the K^T input back to [n, h, t, d] (virtual: fp32 by the
  // frontend's rule, as there).
  STRAIT_ASSIGN_OR_RETURN(auto k, g.Reshape("reshape k", kt, l.Qkv("K", kF32)));
  if (deterministic) return g.Matmul("matmul dS K", ds, k, dq).status();
  const Dims accum_strides = {l.h * l.t * l.d, l.t * l.d, l.d, 1};
  STRAIT_ASSIGN_OR_RETURN(
      auto dq_accum, g.Io(TensorSpec{"dQ_accum", kF32, l.qkv_dims, accum_strides}, kUidDQAccum));
  STRAIT_RETURN_IF_ERROR(g.Matmul("matmul dS K", ds, k, dq_accum).status());
  return g.Unary("identity dQ", CUDNN_POINTWISE_IDENTITY, dq_accum, dq).status();
}

}  // namespace strait::site::cudnn_attention_internal
