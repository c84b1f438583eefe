// The fully connected building block shared by every layer: y = act(x W^T + b), W [out, in].
#pragma once

#include <cstdint>

#include "site/backend/backend.h"

namespace strait::site {

// pre = x W^T + b, y = act(pre) (y may equal pre when the pre-activation is not needed).
void LinearForward(Backend& backend, int64_t rows, int in, int out, const float* x /*[rows, in]*/,
                   const float* w /*[out, in]*/, const float* b /*[out]*/, ActivationOp act,
                   float* pre /*[rows, out]*/, float* y /*[rows, out]*/);

// Given dpre = dLoss/dpre: dw += dpre^T x, db += column sums of dpre, dx = dpre W (unless dx is
// null; overwritten, or accumulated when accumulate_dx).
void LinearBackward(Backend& backend, int64_t rows, int in, int out, const float* x /*[rows, in]*/,
                    const float* w /*[out, in]*/, const float* dpre /*[rows, out]*/,
                    float* dx /*[rows, in]*/, float* dw /*[out, in]*/, float* db /*[out]*/,
                    bool accumulate_dx = false);

}  // namespace strait::site
