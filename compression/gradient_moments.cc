#include "compression/gradient_moments.h"

#include <cblas.h>

#include <algorithm>

namespace strait::compression {

namespace {

// into += the upper triangle of `from` (width x width, row-major); `into` zeros when empty.
template <typename T>
void AddUpper(const T* from, size_t width, std::vector<double>& into) {
  if (into.empty()) into.assign(width * width, 0.0);
  for (size_t i = 0; i < width; ++i) {
    for (size_t j = i; j < width; ++j) into[i * width + j] += from[i * width + j];
  }
}

}  // namespace

void GradientMoments::Fold(Sum& from, Sum& into) const {
  AddUpper(from.upper.data(), width_, into.upper);
  into.rows += from.rows;
}

void GradientMoments::Add(absl::Span<const float> values, size_t width, uint64_t step) {
  if (width == 0) return;
  const size_t rows = values.size() / width;
  if (rows == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (width != width_) {
    width_ = width;
    settled_ = Sum{};
    recent_.clear();
    product_.resize(width * width);
  }
  const int d = static_cast<int>(width);
  cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, d, static_cast<int>(rows), 1.0f, values.data(),
              d, 0.0f, product_.data(), d);
  // A step at least two before the newest (a rollback's, restarting at a checkpoint) is settled.
  const uint64_t newest = std::max(step, recent_.empty() ? step : recent_.rbegin()->first);
  Sum& sum = step + 2 <= newest ? settled_ : recent_[step];
  AddUpper(product_.data(), width, sum.upper);
  sum.rows += rows;
  while (!recent_.empty() && recent_.begin()->first + 2 <= newest) {
    Fold(recent_.begin()->second, settled_);
    recent_.erase(recent_.begin());
  }
}

std::vector<double> GradientMoments::Take(size_t width, uint64_t before) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (width != width_) return {};
  while (!recent_.empty() && recent_.begin()->first < before) {
    Fold(recent_.begin()->second, settled_);
    recent_.erase(recent_.begin());
  }
  if (settled_.rows == 0) return {};
  std::vector<double> moment(width * width);
  const double n = static_cast<double>(settled_.rows);
  for (size_t i = 0; i < width; ++i) {
    for (size_t j = i; j < width; ++j) {
      moment[i * width + j] = moment[j * width + i] = settled_.upper[i * width + j] / n;
    }
  }
  settled_ = Sum{};
  return moment;
}

}  // namespace strait::compression
