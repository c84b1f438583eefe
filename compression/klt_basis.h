// The basis a klt link codes in (klt_stage.cc): `width` directions, largest variance first, and
// the mean they are centred on. Only the sender fits one (CovarianceTracker, with LAPACK: any
// solver would do, since the basis travels). A plain basis is orthonormal, rounded to bf16 before
// use so that both ends transform with exactly the values that travel. A fisher basis is the KLT
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

struct KltBasis {
  uint32_t id = 0;  // 0: the identity, not centred (a link's basis before its first fit)
  size_t width = 0;
  std::vector<float> mean;        // width values
  std::vector<float> directions;  // width x width, row i = direction i (bf16 values)
  // Set by Fit (only the sender transforms): row i gives coefficient i (the directions
  // themselves for a plain basis), and centre = mean analysis^T.
  std::vector<float> analysis, centre;

  // z = (x - mean) analysis^T, for `rows` rows of x (width values each; the identity copies).
  void Forward(const float* x, size_t rows, float* z) const;
  // x = z directions + mean: Forward's inverse up to the directions' bf16 rounding.
  void Inverse(const float* z, size_t rows, float* x) const;
};

// The running mean and covariance of the rows a sender codes. Not thread-safe.
class CovarianceTracker {
 public:
  // Forgets every row; rows now have `width` values.
  void Reset(size_t width);
  size_t width() const { return width_; }
  uint64_t rows() const { return rows_; }  // Added since Reset.
  void Add(const float* x, size_t rows);
  // The eigenvectors of the covariance of the rows added since Reset (at least one), largest
  // eigenvalue first, rounded to bf16, and their mean; then Reset. With `sensitivity` (the
  // gradients' second moment, width x width), a fisher basis. Internal when LAPACK fails.
  absl::StatusOr<KltBasis> Fit(uint32_t id, absl::Span<const double> sensitivity = {});

 private:
  size_t width_ = 0;
  uint64_t rows_ = 0;
  std::vector<double> second_moment_;  // width x width, upper triangle (row-major)
  std::vector<double> sum_;
  std::vector<float> product_;  // One Add's x^T x.
};

}  // namespace strait::compression
