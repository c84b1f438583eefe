#include "compression/klt_basis.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compression/float_bits.h"
#include "core/status.h"

// LAPACK's symmetric eigensolver (divide and conquer), from OpenBLAS; the trailing lengths are
// gfortran's hidden arguments of the two character parameters.
extern "C" void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda,
                        double* w, double* work, const int* lwork, int* iwork, const int* liwork,
                        int* info, size_t jobz_length, size_t uplo_length);

namespace strait::compression {

namespace {

float RoundToBf16(double v) { return Bf16BitsToFloat(FloatToBf16Bits(static_cast<float>(v))); }

// Eigenvectors of the symmetric d x d matrix `a` (both triangles), in place: column k of the
// column-major result is the one of the k-th smallest eigenvalue. Returns the eigenvalues.
absl::StatusOr<std::vector<double>> SymmetricEigen(std::vector<double>& a, size_t d) {
  std::vector<double> eigenvalues(d);
  const int order = static_cast<int>(d);
  int info = 0, lwork = -1, liwork = -1, iwork_size = 0;
  double work_size = 0;
  dsyevd_("V", "L", &order, a.data(), &order, eigenvalues.data(), &work_size, &lwork, &iwork_size,
          &liwork, &info, 1, 1);
  if (info == 0) {
    lwork = static_cast<int>(work_size);
    liwork = iwork_size;
    std::vector<double> work(std::max(lwork, 1));
    std::vector<int> iwork(std::max(liwork, 1));
    dsyevd_("V", "L", &order, a.data(), &order, eigenvalues.data(), work.data(), &lwork,
            iwork.data(), &liwork, &info, 1, 1);
  }
  if (info != 0) {
    return absl::InternalError(
        absl::StrCat("klt: LAPACK dsyevd failed on a matrix of width ", d, " (info ", info, ")"));
  }
  return eigenvalues;
}

// W = (G / its mean eigenvalue + I)^(1/2) and its inverse (row-major); empty when G carries
// nothing (all zero or not finite).
struct Weight {
  std::vector<double> w, inverse;
};

absl::StatusOr<Weight> FisherWeight(absl::Span<const double> g, size_t d) {
  double trace = 0;
  for (size_t i = 0; i < d; ++i) trace += g[i * d + i];
  if (!(trace > 0) || !std::isfinite(trace)) return Weight{};
  std::vector<double> a(g.begin(), g.end());
  for (double& v : a) v *= static_cast<double>(d) / trace;
  for (size_t i = 0; i < d; ++i) a[i * d + i] += 1.0;
  STRAIT_ASSIGN_OR_RETURN(std::vector<double> eigenvalues, SymmetricEigen(a, d));
  Weight weight{std::vector<double>(d * d, 0.0), std::vector<double>(d * d, 0.0)};
  for (size_t k = 0; k < d; ++k) {  // sum over k of f(lambda_k) v_k v_k^T
    const double root = std::sqrt(std::max(eigenvalues[k], 1.0));  // G is >= 0: lambda >= 1
    const double* v = &a[k * d];
    for (size_t i = 0; i < d; ++i) {
      for (size_t j = 0; j < d; ++j) {
        weight.w[i * d + j] += root * v[i] * v[j];
        weight.inverse[i * d + j] += v[i] * v[j] / root;
      }
    }
  }
  return weight;
}

}  // namespace

void KltBasis::Forward(const float* x, size_t rows, float* z) const {
  if (rows == 0) return;
  if (id == 0) {
    std::memcpy(z, x, rows * width * sizeof(float));
    return;
  }
  const int d = static_cast<int>(width);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), d, d, 1.0f, x, d,
              analysis.data(), d, 0.0f, z, d);
  for (size_t r = 0; r < rows; ++r) {
    float* row = z + r * width;
    for (size_t i = 0; i < width; ++i) row[i] -= centre[i];
  }
}

void KltBasis::Inverse(const float* z, size_t rows, float* x) const {
  if (rows == 0) return;
  if (id == 0) {
    std::memcpy(x, z, rows * width * sizeof(float));
    return;
  }
  const int d = static_cast<int>(width);
  for (size_t r = 0; r < rows; ++r) std::memcpy(x + r * width, mean.data(), width * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), d, d, 1.0f, z, d,
              directions.data(), d, 1.0f, x, d);
}

void CovarianceTracker::Reset(size_t width) {
  width_ = width;
  rows_ = 0;
  second_moment_.assign(width * width, 0.0);
  sum_.assign(width, 0.0);
  product_.resize(width * width);
}

void CovarianceTracker::Add(const float* x, size_t rows) {
  if (rows == 0) return;
  const int d = static_cast<int>(width_);
  cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, d, static_cast<int>(rows), 1.0f, x, d, 0.0f,
              product_.data(), d);
  for (size_t i = 0; i < width_; ++i) {
    for (size_t j = i; j < width_; ++j) second_moment_[i * width_ + j] += product_[i * width_ + j];
  }
  for (size_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < width_; ++i) sum_[i] += x[r * width_ + i];
  }
  rows_ += rows;
}

absl::StatusOr<KltBasis> CovarianceTracker::Fit(uint32_t id, absl::Span<const double> sensitivity) {
  const size_t d = width_;
  KltBasis basis;
  basis.id = id;
  basis.width = d;
  basis.mean.resize(d);
  const double n = static_cast<double>(std::max<uint64_t>(rows_, 1));
  for (size_t i = 0; i < d; ++i) basis.mean[i] = static_cast<float>(sum_[i] / n);
  // The covariance, both triangles (row-major is column-major for a symmetric matrix).
  std::vector<double> a(d * d, 0.0);
  for (size_t i = 0; i < d; ++i) {
    for (size_t j = i; j < d; ++j) {
      a[i * d + j] = a[j * d + i] = second_moment_[i * d + j] / n - (sum_[i] / n) * (sum_[j] / n);
    }
  }
  Weight weight;
  if (sensitivity.size() == d * d) {
    STRAIT_ASSIGN_OR_RETURN(weight, FisherWeight(sensitivity, d));
  }
  if (!weight.w.empty()) {  // The covariance of W x: W a W.
    std::vector<double> wa(d * d);
    const int k = static_cast<int>(d);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, k, k, k, 1.0, weight.w.data(), k,
                a.data(), k, 0.0, wa.data(), k);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, k, k, k, 1.0, wa.data(), k,
                weight.w.data(), k, 0.0, a.data(), k);
  }
  STRAIT_RETURN_IF_ERROR(SymmetricEigen(a, d).status());
  // Column k of the column-major result is the eigenvector of the k-th smallest eigenvalue.
  basis.directions.resize(d * d);
  basis.analysis.resize(d * d);
  for (size_t r = 0; r < d; ++r) {
    const double* column = &a[(d - 1 - r) * d];
    if (weight.w.empty()) {
      for (size_t i = 0; i < d; ++i) basis.directions[r * d + i] = RoundToBf16(column[i]);
      continue;
    }
    // Analysis W u, synthesis u^T W^-1 (W is symmetric).
    for (size_t i = 0; i < d; ++i) {
      double analysis = 0, synthesis = 0;
      for (size_t j = 0; j < d; ++j) {
        analysis += weight.w[i * d + j] * column[j];
        synthesis += weight.inverse[i * d + j] * column[j];
      }
      basis.analysis[r * d + i] = static_cast<float>(analysis);
      basis.directions[r * d + i] = RoundToBf16(synthesis);
    }
  }
  if (weight.w.empty()) basis.analysis = basis.directions;
  basis.centre.resize(d);
  const int order = static_cast<int>(d);
  cblas_sgemv(CblasRowMajor, CblasNoTrans, order, order, 1.0f, basis.analysis.data(), order,
              basis.mean.data(), 1, 0.0f, basis.centre.data(), 1);
  Reset(d);
  return basis;
}

}  // namespace strait::compression
