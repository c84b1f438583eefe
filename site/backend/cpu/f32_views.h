// f32 views of typed tensors for the CPU backend's loops (site/backend/cpu/cpu_loops.h): an f32
// tensor is used where it is; a bf16 tensor is widened into a scratch copy (exact), and an output
// computed in f32 is rounded to bf16 when it is committed: what a CUDA kernel does per element
// (load, compute in f32, round once on the store). One thread uses a view.
#pragma once

#include <cstdint>
#include <vector>

#include "site/backend/dtype.h"

namespace strait::site::cpu {

// The value `x` has once stored in a tensor of type `t`.
inline float StoredAs(DType t, float x) { return t == DType::kF32 ? x : Bf16Value(Bf16Bits(x)); }

// n elements of x as floats.
void Widen(int64_t n, ConstTypedPtr x, float* out);
// n floats stored into y in its type.
void Narrow(int64_t n, const float* x, TypedPtr y);

class F32In {
 public:
  F32In(ConstTypedPtr x, int64_t n);
  const float* get() const { return p_; }

 private:
  std::vector<float> copy_;
  const float* p_ = nullptr;
};

class F32Out {
 public:
  // `load`: start from y's contents (accumulating outputs, and strided outputs whose other
  // elements must survive the commit).
  F32Out(TypedPtr y, int64_t n, bool load);
  float* get() { return p_; }
  // Stores the floats into y (rounded for bf16). Call once, after the loop.
  void Commit();

 private:
  TypedPtr y_;
  int64_t n_;
  std::vector<float> copy_;
  float* p_ = nullptr;
};

}  // namespace strait::site::cpu
