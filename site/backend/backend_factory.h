// Makes the backend a job spec asks for. Each backend is its own library (backend/cpu,
// backend/cuda); this factory is the one place that knows which were built.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "compression/klt_math.h"
#include "core/job_spec.h"
#include "site/backend/backend.h"

namespace strait::site {

struct BackendOptions {
  int threads = 1;  // CPU: threads for OpenBLAS and the element-wise loops (fixed: deterministic).
  int device = 0;   // CUDA: device ordinal.
  Precision precision = Precision::kFp32;  // Of matrix products (training.precision).
  AttentionKernel attention = AttentionKernel::kDefault;
  // CUDA: time cuBLASLt's candidate algorithms on each product shape's first call and keep the
  // fastest (lt_matmul.h AlgorithmChoice::kTimed) instead of the heuristic's first choice.
  bool timed_gemm = false;
};

// The backend for `kind`. Asking for CUDA in a build without CUDA, or on a machine without a CUDA
// device, is a FailedPrecondition error that says which. Thread-safe.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(DeviceKind kind,
                                                       const BackendOptions& options);

// Where the klt link codecs of a site whose model runs on `kind` transform
// (compression/klt_math.h): CUDA device `device` for kCuda in a build with CUDA, the host's BLAS
// otherwise (null).
compression::KltMathFactory KltMathFor(DeviceKind kind, int device = 0);

// True when this build includes the CUDA backend (a device may still be missing at run time).
bool BuiltWithCuda();

}  // namespace strait::site
