#include "site/backend/cpu/f32_views.h"

#include <cstring>

namespace strait::site::cpu {

void Widen(int64_t n, ConstTypedPtr x, float* out) {
  if (x.is_f32()) {
    if (n > 0 && out != x.f32()) std::memmove(out, x.f32(), sizeof(float) * n);
    return;
  }
  const auto* h = static_cast<const uint16_t*>(x.data());
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16Value(h[i]);
}

void Narrow(int64_t n, const float* x, TypedPtr y) {
  if (y.is_f32()) {
    if (n > 0 && x != y.f32()) std::memmove(y.f32(), x, sizeof(float) * n);
    return;
  }
  auto* h = static_cast<uint16_t*>(y.data());
  for (int64_t i = 0; i < n; ++i) h[i] = Bf16Bits(x[i]);
}

F32In::F32In(ConstTypedPtr x, int64_t n) {
  if (x.is_f32()) {
    p_ = x.f32();
    return;
  }
  copy_.resize(n);
  Widen(n, x, copy_.data());
  p_ = copy_.data();
}

F32Out::F32Out(TypedPtr y, int64_t n, bool load) : y_(y), n_(n) {
  if (y.is_f32()) {
    p_ = y.f32();
    return;
  }
  copy_.resize(n);
  if (load) Widen(n, y, copy_.data());
  p_ = copy_.data();
}

void F32Out::Commit() {
  if (!y_.is_f32()) Narrow(n_, p_, y_);
}

}  // namespace strait::site::cpu
