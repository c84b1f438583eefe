// The basis a klt link codes in (klt_stage.cc): `width` directions, largest variance first, and
// the mean they are centred on. Only the sender fits one (CovarianceTracker, with LAPACK: any
// solver would do, since the basis travels). A plain basis is orthonormal, each direction rounded
// to a grid of its own (kDirectionLevels steps to its largest value) before use, so that both ends
// transform with exactly the values that travel. A basis may keep only its first `rank` directions:
// the rest are not coded (their coefficients are taken as zero). It may carry a predictor: the
// coefficients of a row from the reconstructed ones of the row before (a token's residual stream
// from the previous token's), so that a sender codes only what it does not predict (the stage's
// closed loop). A fisher basis is the KLT
// of W x, W = (G / its mean eigenvalue + I)^(1/2) for the gradients' second moment G: coefficients
// of equal noise then cost the loss about equally, so the noise falls where the loss is least
// sensitive; its directions (what travels) are the synthesis u^T W^-1, its analysis W u.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace strait::compression {

class KltMath;  // klt_math.h

// A direction's values are whole multiples of its scale, at most this many of them in magnitude
// (about bf16's precision on a unit vector's typical value, finer on its small ones).
inline constexpr int32_t kDirectionLevels = 2047;
// A predictor's row likewise, coarser: its rounding only adds to what is left unpredicted.
inline constexpr int32_t kPredictorLevels = 127;

struct KltBasis {
  uint32_t id = 0;  // 0: the identity, not centred (a link's basis before its first fit)
  size_t width = 0;
  size_t rank = 0;          // directions kept: 1 to width (the identity: width)
  std::vector<float> mean;  // width values
  std::vector<float>
      directions;             // rank x width, row i = direction i = whole multiples of scales[i]
  std::vector<float> scales;  // rank values
  // rank x rank, row k predicts coefficient k (whole multiples of predictor_scales[k]); empty:
  // none.
  std::vector<float> predictor, predictor_scales;
  // Set by Fit (only the sender transforms): row i gives coefficient i (the directions
  // themselves for a plain basis), and centre = mean analysis^T. A KltMath transforms (klt_math.h):
  // z = (x - mean) analysis^T, and back x = z directions + mean (up to the directions' rounding
  // and the ones not kept).
  std::vector<float> analysis, centre;

  // prediction = predictor previous (rank values each); zeros without a predictor.
  void Predict(const float* previous, float* prediction) const;
};

struct FitOptions {
  absl::Span<const double> sensitivity;  // fisher: the gradients' second moment (width x width)
  double floor = 0;  // keep the directions whose variance is at least floor x the mean variance
  double noise = 0;  // the coder's noise a coefficient, x the mean variance (the predictor's ridge)
  // Rows the basis will code: a predictor is kept when it saves more bits over them than it costs
  // to send; 0: no predictor.
  uint64_t predicted_rows = 0;
};

// The running mean and covariance of the rows a sender codes. Not thread-safe.
class CovarianceTracker {
 public:
  // Forgets every row; rows now have `width` values.
  void Reset(size_t width);
  size_t width() const { return width_; }
  uint64_t rows() const { return rows_; }  // Added since Reset.
  // `rows` rows of `width` values, which `math` holds (KltMath::LoadRows) and multiplies.
  absl::Status Add(const float* x, size_t rows, KltMath& math);
  // The eigenvectors of the covariance of the rows added since Reset (at least one), largest
  // eigenvalue first, rounded, and their mean; then Reset. Rows within one Add are taken as a
  // sequence (for the predictor: each from the one before). Internal when LAPACK fails.
  absl::StatusOr<KltBasis> Fit(uint32_t id, const FitOptions& options = {});

 private:
  size_t width_ = 0;
  uint64_t rows_ = 0;
  void FitPredictor(const std::vector<double>& variances, double noise, uint64_t rows,
                    KltBasis* basis) const;

  std::vector<double> second_moment_;  // width x width, upper triangle (row-major)
  std::vector<double> sum_;
  std::vector<double> lagged_;  // width x width: sum of x_t x_(t-1)^T over consecutive rows
  uint64_t pairs_ = 0;          // of consecutive rows
  std::vector<float> product_, lagged_product_;  // One Add's x^T x and its lagged product.
};

}  // namespace strait::compression
