// The fully connected building block shared by every layer: y = act(x W^T + b), W [out, in].
// x, y and the gradients of activations are in their tensors' types; W is read as a product
// operand (LayerParams::Operand), its gradient and b's are f32.
#pragma once

#include <cstdint>

#include "site/backend/backend.h"
#include "site/nn/layer.h"

namespace strait::site {

// pre = x W^T + b, y = act(pre), in one product with the bias and activation in its epilogue. `pre`
// is written only when it is set and not y (GELU's backward needs it; ReLU's reads y).
void LinearForward(Backend& backend, int64_t rows, int in, int out, ConstTypedPtr x /*[rows, in]*/,
                   ConstTypedPtr w /*[out, in]*/, const float* b /*[out]*/, ActivationOp act,
                   TypedPtr pre /*[rows, out]*/, TypedPtr y /*[rows, out]*/);

// Row-parallel under tensor parallelism: y [rows, out] = x [rows, in] W^T summed over the ranks
// of `shard` (each holds `in` of the input features), then + b (may be null). LinearForward for a
// whole layer.
void RowParallelForward(Backend& backend, const TensorShard& shard, int64_t rows, int in, int out,
                        ConstTypedPtr x, ConstTypedPtr w, const float* b, TypedPtr y);

// Given dpre = dLoss/dpre: dw += dpre^T x, db += column sums of dpre (unless db is null: a fused
// product computed it), dx = dpre W (unless dx is null; overwritten, or accumulated when
// accumulate_dx).
void LinearBackward(Backend& backend, int64_t rows, int in, int out, ConstTypedPtr x /*[rows, in]*/,
                    ConstTypedPtr w /*[out, in]*/, ConstTypedPtr dpre /*[rows, out]*/,
                    TypedPtr dx /*[rows, in]*/, float* dw /*[out, in]*/, float* db /*[out]*/,
                    bool accumulate_dx = false);

// The input gradient through this linear layer and the activation before it, in one product:
// dx_pre = (dpre W) * act'(x_pre), where x_pre [rows, in] is the previous layer's pre-activation,
// and x_bias_grad += the column sums of dx_pre (the previous layer's bias gradient; may be null).
void LinearBackwardThroughActivation(Backend& backend, int64_t rows, int in, int out,
                                     ConstTypedPtr w /*[out, in]*/,
                                     ConstTypedPtr dpre /*[rows, out]*/, ActivationOp act,
                                     ConstTypedPtr x_pre /*[rows, in]*/,
                                     TypedPtr dx_pre /*[rows, in]*/, float* x_bias_grad /*[in]*/);

}  // namespace strait::site
