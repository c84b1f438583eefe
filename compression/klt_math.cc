#include "compression/klt_math.h"

#include <cblas.h>

#include <cstring>

namespace strait::compression {
namespace {

class HostKltMath final : public KltMath {
 public:
  absl::Status SetBasis(const KltBasis& basis) override {
    basis_ = basis;
    return absl::OkStatus();
  }

  absl::Status LoadRows(const float* x, size_t rows, size_t width) override {
    x_ = x;
    rows_ = rows;
    width_ = width;
    return absl::OkStatus();
  }

  absl::Status Products(float* gram, float* lagged) override {
    if (rows_ == 0) return absl::OkStatus();
    const int d = static_cast<int>(width_);
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, d, static_cast<int>(rows_), 1.0f, x_, d,
                0.0f, gram, d);
    if (rows_ < 2) return absl::OkStatus();
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, d, static_cast<int>(rows_ - 1), 1.0f,
                x_ + width_, d, x_, d, 0.0f, lagged, d);
    return absl::OkStatus();
  }

  absl::Status Forward(float* z) override {
    if (rows_ == 0) return absl::OkStatus();
    const int d = static_cast<int>(basis_.width), k = static_cast<int>(basis_.rank);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows_), k, d, 1.0f, x_, d,
                basis_.analysis.data(), d, 0.0f, z, k);
    for (size_t r = 0; r < rows_; ++r) {
      float* row = z + r * basis_.rank;
      for (size_t i = 0; i < basis_.rank; ++i) row[i] -= basis_.centre[i];
    }
    return absl::OkStatus();
  }

  absl::Status Inverse(const float* z, size_t rows, float* x) override {
    if (rows == 0) return absl::OkStatus();
    const size_t width = basis_.width;
    const int d = static_cast<int>(width), k = static_cast<int>(basis_.rank);
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(x + r * width, basis_.mean.data(), width * sizeof(float));
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), d, k, 1.0f, z, k,
                basis_.directions.data(), d, 1.0f, x, d);
    return absl::OkStatus();
  }

 private:
  KltBasis basis_;
  const float* x_ = nullptr;
  size_t rows_ = 0, width_ = 0;
};

}  // namespace

std::unique_ptr<KltMath> MakeHostKltMath() { return std::make_unique<HostKltMath>(); }

}  // namespace strait::compression
