#include "compression/klt_basis.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compression/klt_math.h"
#include "core/status.h"

// LAPACK's symmetric eigensolver (divide and conquer), from OpenBLAS; the trailing lengths are
// gfortran's hidden arguments of the two character parameters.
extern "C" void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda,
                        double* w, double* work, const int* lwork, int* iwork, const int* liwork,
                        int* info, size_t jobz_length, size_t uplo_length);

namespace strait::compression {

namespace {

// Rounds `row` to whole multiples of a scale, `levels` of them at its largest value; returns the
// scale (0 for a row of zeros).
float RoundRow(const std::vector<double>& row, int32_t levels, float* out) {
  double largest = 0;
  for (double v : row) largest = std::max(largest, std::abs(v));
  const float scale = static_cast<float>(largest / levels);
  for (size_t i = 0; i < row.size(); ++i) {
    out[i] = scale > 0 ? static_cast<float>(std::nearbyint(row[i] / scale)) * scale : 0.0f;
  }
  return scale;
}

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

void KltBasis::Predict(const float* previous, float* prediction) const {
  if (predictor.empty()) {
    std::fill_n(prediction, rank, 0.0f);
    return;
  }
  const int k = static_cast<int>(rank);
  cblas_sgemv(CblasRowMajor, CblasNoTrans, k, k, 1.0f, predictor.data(), k, previous, 1, 0.0f,
              prediction, 1);
}

void CovarianceTracker::Reset(size_t width) {
  width_ = width;
  rows_ = 0;
  pairs_ = 0;
  second_moment_.assign(width * width, 0.0);
  lagged_.assign(width * width, 0.0);
  sum_.assign(width, 0.0);
  product_.resize(width * width);
  lagged_product_.resize(width * width);
}

absl::Status CovarianceTracker::Add(const float* x, size_t rows, KltMath& math) {
  if (rows == 0) return absl::OkStatus();
  STRAIT_RETURN_IF_ERROR(math.Products(product_.data(), lagged_product_.data()));
  for (size_t i = 0; i < width_; ++i) {
    for (size_t j = i; j < width_; ++j) second_moment_[i * width_ + j] += product_[i * width_ + j];
  }
  for (size_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < width_; ++i) sum_[i] += x[r * width_ + i];
  }
  rows_ += rows;
  if (rows < 2) return absl::OkStatus();
  for (size_t i = 0; i < width_ * width_; ++i) lagged_[i] += lagged_product_[i];
  pairs_ += rows - 1;
  return absl::OkStatus();
}

absl::StatusOr<KltBasis> CovarianceTracker::Fit(uint32_t id, const FitOptions& options) {
  const absl::Span<const double> sensitivity = options.sensitivity;
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
  STRAIT_ASSIGN_OR_RETURN(const std::vector<double> variances, SymmetricEigen(a, d));
  double mean_variance = 0;
  for (double v : variances) mean_variance += v / static_cast<double>(d);
  basis.rank = options.floor > 0 ? 1 : d;  // Ascending: the largest, and those above the floor.
  while (basis.rank < d && variances[d - 1 - basis.rank] >= options.floor * mean_variance) {
    ++basis.rank;
  }
  // Column k of the column-major result is the eigenvector of the k-th smallest eigenvalue.
  basis.directions.resize(basis.rank * d);
  basis.analysis.resize(basis.rank * d);
  basis.scales.resize(basis.rank);
  std::vector<double> synthesis(d);
  for (size_t r = 0; r < basis.rank; ++r) {
    const double* column = &a[(d - 1 - r) * d];
    if (weight.w.empty()) {
      synthesis.assign(column, column + d);
    } else {  // Analysis W u, synthesis u^T W^-1 (W is symmetric).
      for (size_t i = 0; i < d; ++i) {
        double analysis = 0, inverse = 0;
        for (size_t j = 0; j < d; ++j) {
          analysis += weight.w[i * d + j] * column[j];
          inverse += weight.inverse[i * d + j] * column[j];
        }
        basis.analysis[r * d + i] = static_cast<float>(analysis);
        synthesis[i] = inverse;
      }
    }
    basis.scales[r] = RoundRow(synthesis, kDirectionLevels, &basis.directions[r * d]);
  }
  if (weight.w.empty()) basis.analysis = basis.directions;
  basis.centre.resize(basis.rank);
  cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(basis.rank), static_cast<int>(d), 1.0f,
              basis.analysis.data(), static_cast<int>(d), basis.mean.data(), 1, 0.0f,
              basis.centre.data(), 1);
  if (options.predicted_rows > 0 && pairs_ > 0) {
    std::vector<double> kept(basis.rank);
    for (size_t k = 0; k < basis.rank; ++k) kept[k] = std::max(variances[d - 1 - k], 0.0);
    FitPredictor(kept, options.noise * mean_variance, options.predicted_rows, &basis);
  }
  Reset(d);
  return basis;
}

// The least-squares predictor of a row's coefficients from the reconstructed ones of the row
// before, whose noise (variance `noise` each) acts as a ridge: A = C1 (diag(variances) + noise)^-1
// for the lag-one covariance C1 of the coefficients (their covariance is diagonal). Kept when the
// bits it saves over `rows` rows (half the log of each variance over what is left unpredicted,
// both floored by the noise) are more than twice the bits it takes to send (at most 8 a value).
void CovarianceTracker::FitPredictor(const std::vector<double>& variances, double noise,
                                     uint64_t rows, KltBasis* basis) const {
  const size_t d = width_, k = basis->rank;
  const double n = static_cast<double>(rows_), pairs = static_cast<double>(pairs_);
  std::vector<double> lagged(d * d), analysis(basis->analysis.begin(), basis->analysis.end());
  for (size_t i = 0; i < d; ++i) {  // Centred on the mean of all rows.
    for (size_t j = 0; j < d; ++j) {
      lagged[i * d + j] = lagged_[i * d + j] / pairs - (sum_[i] / n) * (sum_[j] / n);
    }
  }
  std::vector<double> half(k * d), covariance(k * k);  // analysis C1 analysis^T
  const int kk = static_cast<int>(k), dd = static_cast<int>(d);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kk, dd, dd, 1.0, analysis.data(), dd,
              lagged.data(), dd, 0.0, half.data(), dd);
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kk, kk, dd, 1.0, half.data(), dd,
              analysis.data(), dd, 0.0, covariance.data(), kk);
  const double ridge = std::max(noise, 1e-30);
  std::vector<double> row(k);
  std::vector<float> predictor(k * k), scales(k);
  double saved_bits = 0;
  for (size_t a = 0; a < k; ++a) {
    double explained = 0;
    for (size_t b = 0; b < k; ++b) {
      row[b] = covariance[a * k + b] / (variances[b] + ridge);
      explained += covariance[a * k + b] * row[b];
    }
    const double left = std::max(variances[a] - explained, 0.0);
    saved_bits += 0.5 * std::log2((variances[a] + ridge) / (left + ridge));
    scales[a] = RoundRow(row, kPredictorLevels, &predictor[a * k]);
  }
  if (!(saved_bits * static_cast<double>(rows) > 2 * 8.0 * static_cast<double>(k * k))) return;
  basis->predictor = std::move(predictor);
  basis->predictor_scales = std::move(scales);
}

}  // namespace strait::compression
