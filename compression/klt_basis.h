// The basis a klt link codes in (klt_stage.cc): `width` orthonormal directions, largest variance
// first, and the mean they are centred on. Only the sender fits one (CovarianceTracker, with
// LAPACK: any solver would do, since the basis travels); it rounds the directions to bf16 before
// using them, so that both ends transform with exactly the values that travel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace strait::compression {

struct KltBasis {
  uint32_t id = 0;  // 0: the identity, not centred (a link's basis before its first fit)
  size_t width = 0;
  std::vector<float> mean;        // width values
  std::vector<float> directions;  // width x width, row i = direction i (bf16 values)
  std::vector<float> centre;      // mean directions^T (set by Fit: only the sender transforms)

  // z = (x - mean) directions^T, for `rows` rows of x (width values each; the identity copies).
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
  // eigenvalue first, rounded to bf16, and their mean; then Reset. Internal when LAPACK fails.
  absl::StatusOr<KltBasis> Fit(uint32_t id);

 private:
  size_t width_ = 0;
  uint64_t rows_ = 0;
  std::vector<double> second_moment_;  // width x width, upper triangle (row-major)
  std::vector<double> sum_;
  std::vector<float> product_;  // One Add's x^T x.
};

}  // namespace strait::compression
