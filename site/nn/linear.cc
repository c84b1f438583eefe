#include "site/nn/linear.h"

namespace strait::site {

void LinearForward(Backend& backend, int64_t rows, int in, int out, const float* x, const float* w,
                   const float* b, ActivationOp act, float* pre, float* y) {
  const int m = static_cast<int>(rows);
  backend.Gemm(false, true, m, out, in, 1.0f, x, in, w, in, 0.0f, pre, out);
  backend.BiasActivation(rows, out, b, act, pre, y);
}

void LinearBackward(Backend& backend, int64_t rows, int in, int out, const float* x, const float* w,
                    const float* dpre, float* dx, float* dw, float* db, bool accumulate_dx) {
  const int m = static_cast<int>(rows);
  backend.Gemm(true, false, out, in, m, 1.0f, dpre, out, x, in, 1.0f, dw, in);
  backend.ColumnSum(rows, out, dpre, out, 1.0f, db);
  if (dx != nullptr) {
    backend.Gemm(false, false, m, in, out, 1.0f, dpre, out, w, in, accumulate_dx ? 1.0f : 0.0f, dx,
                 in);
  }
}

}  // namespace strait::site
