#include "site/backend/backend_factory.h"

#include "site/backend/cpu/cpu_backend.h"
#if STRAIT_WITH_CUDA
#include "compression/cuda/klt_device.h"
#include "site/backend/cuda/cuda_backend.h"
#endif

namespace strait::site {

bool BuiltWithCuda() { return STRAIT_WITH_CUDA != 0; }

compression::KltMathFactory KltMathFor(DeviceKind kind, int device) {
#if STRAIT_WITH_CUDA
  if (kind == DeviceKind::kCuda) return compression::CudaKltMath(device);
#endif
  (void)kind;
  (void)device;
  return nullptr;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(DeviceKind kind,
                                                       const BackendOptions& options) {
  if (kind == DeviceKind::kCpu) {
    return CreateCpuBackend(options.threads, options.precision, options.attention);
  }
#if STRAIT_WITH_CUDA
  return CreateCudaBackend(options.device, options.precision, options.attention,
                           options.timed_gemm);
#else
  return absl::FailedPreconditionError(
      "device 'cuda' requested, but this build has no CUDA support: install the CUDA toolkit and "
      "configure with -DSTRAIT_CUDA=ON, or use device 'cpu'");
#endif
}

}  // namespace strait::site
