#include "site/nn/linear.h"

namespace strait::site {

void LinearForward(Backend& backend, int64_t rows, int in, int out, ConstTypedPtr x,
                   ConstTypedPtr w, const float* b, ActivationOp act, TypedPtr pre, TypedPtr y) {
  GemmEpilogue epilogue;
  epilogue.bias = b;
  epilogue.act = act;
  if (pre && pre.data() != y.data()) epilogue.pre = pre;
  backend.Gemm(false, true, static_cast<int>(rows), out, in, 1.0f, x, in, w, in, 0.0f, y, out,
               epilogue);
}

void RowParallelForward(Backend& backend, const TensorShard& shard, int64_t rows, int in, int out,
                        ConstTypedPtr x, ConstTypedPtr w, const float* b, TypedPtr y) {
  if (shard.parts == 1) {
    LinearForward(backend, rows, in, out, x, w, b, ActivationOp::kNone, y, y);
    return;
  }
  backend.Gemm(false, true, static_cast<int>(rows), out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  shard.reducer->AllReduceSum(backend, y, rows * out);
  if (b != nullptr) backend.BiasActivation(rows, out, b, ActivationOp::kNone, y, y);
}

void LinearBackward(Backend& backend, int64_t rows, int in, int out, ConstTypedPtr x,
                    ConstTypedPtr w, ConstTypedPtr dpre, TypedPtr dx, float* dw, float* db,
                    bool accumulate_dx) {
  const int m = static_cast<int>(rows);
  backend.Gemm(true, false, out, in, m, 1.0f, dpre, out, x, in, 1.0f, dw, in);
  if (db != nullptr) backend.ColumnSum(rows, out, dpre, out, 1.0f, db);
  if (dx) {
    backend.Gemm(false, false, m, in, out, 1.0f, dpre, out, w, in, accumulate_dx ? 1.0f : 0.0f, dx,
                 in);
  }
}

void LinearBackwardThroughActivation(Backend& backend, int64_t rows, int in, int out,
                                     ConstTypedPtr w, ConstTypedPtr dpre, ActivationOp act,
                                     ConstTypedPtr x_pre, TypedPtr dx_pre, float* x_bias_grad) {
  GemmEpilogue epilogue;
  epilogue.grad_of = act;
  epilogue.act_input = x_pre;
  epilogue.bias_grad = x_bias_grad;
  backend.Gemm(false, false, static_cast<int>(rows), in, out, 1.0f, dpre, out, w, in, 0.0f, dx_pre,
               in, epilogue);
}

}  // namespace strait::site
