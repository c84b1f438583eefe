#include "site/nn/dense_layer.h"

#include "site/nn/linear.h"

namespace strait::site {

DenseLayer::DenseLayer(LayerLayout layout, DType act_dtype, ActivationOp act, float dropout,
                       ShardRole role, TensorShard shard)
    : Layer(std::move(layout), act_dtype),
      act_(act),
      dropout_(dropout),
      role_(role),
      shard_(shard) {}

// GELU's derivative needs the pre-activation; ReLU's is read off the output.
int64_t DenseLayer::SavedBytes(int n) const {
  return act_ == ActivationOp::kGelu ? n * out_features() * SizeOf(act_dtype()) : 0;
}

// A row-sliced layer keeps its slice of the input and of the input's gradient there.
int64_t DenseLayer::ScratchBytes(int n) const {
  if (role_ != ShardRole::kRowSliced) return 0;
  ArenaCarver c;  // f32 room: the model's first layer takes f32 data
  c.F32(int64_t{n} * (in_features() / shard_.parts));
  c.F32(int64_t{n} * (in_features() / shard_.parts));
  return c.bytes();
}

void DenseLayer::DropColumns(Backend& backend, const PassInfo& pass, int n, TypedPtr y) const {
  const int64_t out = out_features(), whole = out * shard_.parts;
  for (int i = 0; i < n; ++i) {
    backend.Dropout(out, dropout_, pass.dropout_key,
                    (pass.first_row + i) * whole + shard_.index * out, y + i * out, y + i * out);
  }
}

void DenseLayer::Forward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                         ConstTypedPtr x, TypedPtr y, void* saved, void* scratch) {
  const int out = static_cast<int>(out_features());
  const TypedPtr pre = act_ == ActivationOp::kGelu ? TypedPtr(saved, act_dtype()) : y;
  const bool drop = pass.training && dropout_ > 0.0f;
  if (role_ == ShardRole::kReplicated || role_ == ShardRole::kColumn) {
    const int in = static_cast<int>(in_features());
    LinearForward(backend, n, in, out, x, params.Operand(0), params.value[1], act_, pre, y);
    if (drop && role_ == ShardRole::kColumn) {
      DropColumns(backend, pass, n, y);
    } else if (drop) {
      backend.Dropout(int64_t{n} * out, dropout_, pass.dropout_key, pass.first_row * out, y, y);
    }
    return;
  }
  // Row-parallel: this rank's input features times its columns of W, summed across the ranks,
  // then the bias, activation and dropout of the whole output (the same on every rank).
  // A row layer's input is its slice already; a row-sliced one takes its slice of the whole.
  const int in = static_cast<int>(role_ == ShardRole::kRowSliced ? in_features() / shard_.parts
                                                                 : in_features());
  ConstTypedPtr slice = x;
  if (role_ == ShardRole::kRowSliced) {
    const TypedPtr part(scratch, x.dtype());
    backend.Copy2D(n, in, x + int64_t{shard_.index} * in, in_features(), part, in);
    slice = part;
  }
  backend.Gemm(false, true, n, out, in, 1.0f, slice, in, params.Operand(0), in, 0.0f, pre, out);
  shard_.reducer->AllReduceSum(backend, pre, int64_t{n} * out);
  backend.BiasActivation(n, out, params.value[1], act_, pre, y);
  if (drop)
    backend.Dropout(int64_t{n} * out, dropout_, pass.dropout_key, pass.first_row * out, y, y);
}

void DenseLayer::Backward(Backend& backend, const LayerParams& params, const PassInfo& pass, int n,
                          ConstTypedPtr x, ConstTypedPtr y, TypedPtr dy, TypedPtr dx,
                          const void* saved, void* scratch) {
  const int64_t in = in_features(), out = out_features(), count = int64_t{n} * out;
  if (pass.training && dropout_ > 0.0f) {
    if (role_ == ShardRole::kColumn) {
      DropColumns(backend, pass, n, dy);
    } else {
      backend.Dropout(count, dropout_, pass.dropout_key, pass.first_row * out, dy, dy);
    }
  }
  // ReLU after dropout: a dropped unit has y = 0 and gets no gradient either way.
  if (act_ != ActivationOp::kNone) {
    backend.ActivationBackward(
        count, act_, act_ == ActivationOp::kGelu ? ConstTypedPtr(saved, act_dtype()) : y, dy, dy);
  }
  const int o = static_cast<int>(out);
  if (role_ == ShardRole::kRowSliced) {
    // Gradients of this rank's input slice; the whole input gradient is the sum of the ranks'
    // zero-padded slices.
    const int slice = static_cast<int>(in / shard_.parts);
    ArenaCarver c(scratch);
    const TypedPtr x_slice = c.Take(int64_t{n} * slice, x.dtype());
    const TypedPtr dx_slice = c.Take(int64_t{n} * slice, x.dtype());
    backend.Copy2D(n, slice, x + int64_t{shard_.index} * slice, in, x_slice, slice);
    LinearBackward(backend, n, slice, o, x_slice, params.Operand(0), dy, dx ? dx_slice : TypedPtr(),
                   params.grad[0], params.grad[1]);
    if (dx) {
      backend.Fill(dx, int64_t{n} * in, 0.0f);
      backend.Copy2D(n, slice, dx_slice, slice, dx + int64_t{shard_.index} * slice, in);
      shard_.reducer->AllReduceSum(backend, dx, int64_t{n} * in);
    }
    return;
  }
  LinearBackward(backend, n, static_cast<int>(in), o, x, params.Operand(0), dy, dx, params.grad[0],
                 params.grad[1]);
  // A column layer's input gradient is partial on every rank: the sum is the whole.
  if (role_ == ShardRole::kColumn && dx) {
    shard_.reducer->AllReduceSum(backend, dx, int64_t{n} * in);
  }
}

}  // namespace strait::site
