#include "compression/gradient_moments.h"

#include <cblas.h>

namespace strait::compression {

void GradientMoments::Add(absl::Span<const float> values, size_t width) {
  if (width == 0) return;
  const size_t rows = values.size() / width;
  if (rows == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (width != width_) {
    width_ = width;
    rows_ = 0;
    sum_.assign(width * width, 0.0);
    product_.resize(width * width);
  }
  const int d = static_cast<int>(width);
  cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, d, static_cast<int>(rows), 1.0f, values.data(),
              d, 0.0f, product_.data(), d);
  for (size_t i = 0; i < width; ++i) {
    for (size_t j = i; j < width; ++j) sum_[i * width + j] += product_[i * width + j];
  }
  rows_ += rows;
}

std::vector<double> GradientMoments::Take(size_t width) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (width != width_ || rows_ == 0) return {};
  std::vector<double> moment(width * width);
  const double n = static_cast<double>(rows_);
  for (size_t i = 0; i < width; ++i) {
    for (size_t j = i; j < width; ++j) {
      moment[i * width + j] = moment[j * width + i] = sum_[i * width + j] / n;
    }
  }
  rows_ = 0;
  sum_.assign(width * width, 0.0);
  return moment;
}

}  // namespace strait::compression
