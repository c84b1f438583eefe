// The products of a klt link that grow with its rows (klt_stage.cc): each frame's moments for the
// sender's covariance, its transform into the basis and the receiver's transform back. They run
// where the link's tensors are computed: the host's BLAS (MakeHostKltMath), or a GPU's cuBLAS
// (compression/cuda/klt_device.h), so that a GPU site's few CPU cores only round and code. The
// two give the same values to a float's rounding, which the stage tolerates (its two ends' BLAS
// may differ anyway). One instance per stage and side; not thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "compression/klt_basis.h"

namespace strait::compression {

class KltMath {
 public:
  virtual ~KltMath() = default;
  // The basis Forward and Inverse use from now on (a fitted one, not the identity); copied.
  virtual absl::Status SetBasis(const KltBasis& basis) = 0;
  // A frame's rows (`rows` x `width` floats, host memory), which Products and Forward then read;
  // `x` stays valid until the frame's last call.
  virtual absl::Status LoadRows(const float* x, size_t rows, size_t width) = 0;
  // The loaded rows' x^T x into the upper triangle of `gram` (width x width, row-major; the rest
  // unspecified) and, with two rows or more, sum over t of x_(t+1)^T x_t into `lagged` (width x
  // width, row-major; untouched with fewer rows).
  virtual absl::Status Products(float* gram, float* lagged) = 0;
  // z = (x - mean) analysis^T of the loaded rows in the basis: rows x rank values.
  virtual absl::Status Forward(float* z) = 0;
  // x = z directions + mean: `rows` rows of rank coefficients to rows of width values (host).
  virtual absl::Status Inverse(const float* z, size_t rows, float* x) = 0;
};

// Makes a stage's KltMath (CodecOptions::klt_math); null: the host's.
using KltMathFactory = std::function<std::unique_ptr<KltMath>()>;

// OpenBLAS, on the calling thread.
std::unique_ptr<KltMath> MakeHostKltMath();

}  // namespace strait::compression
