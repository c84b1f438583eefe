// Storage types of tensors on a backend (DESIGN.md §3 "Precision"), and typed pointers that carry
// their tensor's type through the Backend ops.
//
// Master weights, gradient accumulators, optimizer state and per-row statistics are always f32
// (plain float*). Activations, their gradients and the product operands (the weights' low-precision
// copy) are stored in the backend's activation type (Backend::activation_dtype()): f32, or bf16
// under training.precision: bf16. An op reads each element, computes in f32 and rounds once when it
// stores (round to nearest even), on every backend: the CPU's loops do exactly what the CUDA
// kernels do, up to the order of sums. An 8-bit float type would be one more DType here (with its
// per-tensor scale beside the pointer), taken by the ops that can use it.
//
// Header-only; usable from CUDA kernels.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "site/backend/counter_rng.h"  // STRAIT_HOST_DEVICE

namespace strait::site {

enum class DType : uint8_t {
  kF32 = 0,   // IEEE binary32
  kBf16 = 1,  // bfloat16: binary32's upper 16 bits, rounded to nearest even
};

STRAIT_HOST_DEVICE inline constexpr int SizeOf(DType t) { return t == DType::kF32 ? 4 : 2; }
inline const char* ToString(DType t) { return t == DType::kF32 ? "f32" : "bf16"; }

// The bf16 bits nearest to x (ties to even). NaN stays NaN; beyond bf16's largest value it
// rounds to infinity.
STRAIT_HOST_DEVICE inline uint16_t Bf16Bits(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// The float a bf16 holds (exact).
STRAIT_HOST_DEVICE inline float Bf16Value(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float x;
  memcpy(&x, &bits, sizeof x);
  return x;
}

// A pointer to the first element of a tensor in a backend's memory and the type its elements are
// stored in. Not owning; as cheap to pass as a pointer. A float* converts implicitly (an f32
// tensor), so master weights and f32 buffers pass where a typed tensor is taken.
template <typename Void>  // void, or const void
class BasicTypedPtr {
 public:
  using Float = std::conditional_t<std::is_const_v<Void>, const float, float>;
  using Bytes = std::conditional_t<std::is_const_v<Void>, const char, char>;

  constexpr BasicTypedPtr() = default;
  constexpr BasicTypedPtr(Void* data, DType dtype) : data_(data), dtype_(dtype) {}
  constexpr BasicTypedPtr(Float* f32) : data_(f32), dtype_(DType::kF32) {}  // NOLINT
  constexpr BasicTypedPtr(std::nullptr_t) {}                                // NOLINT
  template <typename Other,
            typename = std::enable_if_t<std::is_const_v<Void> && !std::is_const_v<Other>>>
  constexpr BasicTypedPtr(const BasicTypedPtr<Other>& p)  // NOLINT: writable -> readable
      : data_(p.data()), dtype_(p.dtype()) {}

  Void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  bool is_f32() const { return dtype_ == DType::kF32; }
  explicit operator bool() const { return data_ != nullptr; }

  // The element `elements` after this one (of the same type).
  BasicTypedPtr operator+(int64_t elements) const {
    return {static_cast<Bytes*>(data_) + elements * SizeOf(dtype_), dtype_};
  }
  // The pointer as float*: only for an f32 tensor (nullptr otherwise).
  Float* f32() const { return is_f32() ? static_cast<Float*>(data_) : nullptr; }

 private:
  Void* data_ = nullptr;
  DType dtype_ = DType::kF32;
};

using TypedPtr = BasicTypedPtr<void>;
using ConstTypedPtr = BasicTypedPtr<const void>;

}  // namespace strait::site
