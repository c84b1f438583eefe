#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "compression/cuda/klt_device.h"
#include "core/library_check.h"
#include "core/status.h"

namespace strait::compression {
namespace {

constexpr int kThreads = 256;

// z[r][i] -= centre[i] for rows of k.
__global__ void SubtractCentre(float* z, const float* centre, uint64_t n, uint32_t k) {
  const uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) z[i] -= centre[i % k];
}

// x[r][i] = mean[i] for rows of d.
__global__ void FillRows(float* x, const float* mean, uint64_t n, uint32_t d) {
  const uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) x[i] = mean[i % d];
}

unsigned Blocks(uint64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// Device floats that grow and never shrink.
class DeviceFloats {
 public:
  DeviceFloats() = default;
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  ~DeviceFloats() { cudaFree(data_); }

  absl::Status Reserve(size_t n) {
    if (n <= capacity_) return absl::OkStatus();
    cudaFree(data_);
    data_ = nullptr;
    capacity_ = 0;
    STRAIT_RETURN_IF_ERROR(
        STRAIT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), n * sizeof(float))));
    capacity_ = n;
    return absl::OkStatus();
  }
  float* get() const { return data_; }

 private:
  float* data_ = nullptr;
  size_t capacity_ = 0;
};

class DeviceKltMath final : public KltMath {
 public:
  explicit DeviceKltMath(int device) : device_(device) {}
  DeviceKltMath(const DeviceKltMath&) = delete;
  DeviceKltMath& operator=(const DeviceKltMath&) = delete;
  ~DeviceKltMath() override {
    if (stream_ == nullptr) return;
    cudaSetDevice(device_);
    if (handle_ != nullptr) (void)cublasDestroy(handle_);
    cudaStreamDestroy(stream_);
  }

  absl::Status SetBasis(const KltBasis& basis) override {
    STRAIT_RETURN_IF_ERROR(Bind());
    width_ = basis.width;
    rank_ = basis.rank;
    STRAIT_RETURN_IF_ERROR(Upload(basis.analysis.data(), basis.analysis.size(), analysis_));
    STRAIT_RETURN_IF_ERROR(Upload(basis.centre.data(), basis.centre.size(), centre_));
    STRAIT_RETURN_IF_ERROR(Upload(basis.directions.data(), basis.directions.size(), directions_));
    return Upload(basis.mean.data(), basis.mean.size(), mean_);
  }

  absl::Status LoadRows(const float* x, size_t rows, size_t width) override {
    STRAIT_RETURN_IF_ERROR(Bind());
    rows_ = rows;
    row_width_ = width;
    return Upload(x, rows * width, x_);
  }

  absl::Status Products(float* gram, float* lagged) override {
    if (rows_ == 0) return absl::OkStatus();
    STRAIT_RETURN_IF_ERROR(Bind());
    const int d = static_cast<int>(row_width_);
    const size_t square = row_width_ * row_width_;
    STRAIT_RETURN_IF_ERROR(gram_.Reserve(square));
    STRAIT_RETURN_IF_ERROR(lagged_.Reserve(square));
    const float one = 1.0f, zero = 0.0f;
    // Column-major, x is d x rows and the host's row-major upper triangle is the lower one here.
    STRAIT_RETURN_IF_ERROR(STRAIT_CUBLAS_CHECK(
        cublasSsyrk(handle_, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, d, static_cast<int>(rows_), &one,
                    x_.get(), d, &zero, gram_.get(), d)));
    STRAIT_RETURN_IF_ERROR(Download(gram_, square, gram));
    if (rows_ >= 2) {  // Row-major sum x_(t+1)^T x_t is column-major sum x_t x_(t+1)^T.
      STRAIT_RETURN_IF_ERROR(STRAIT_CUBLAS_CHECK(
          cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_T, d, d, static_cast<int>(rows_ - 1), &one,
                      x_.get(), d, x_.get() + row_width_, d, &zero, lagged_.get(), d)));
      STRAIT_RETURN_IF_ERROR(Download(lagged_, square, lagged));
    }
    return Synchronize();
  }

  absl::Status Forward(float* z) override {
    if (rows_ == 0) return absl::OkStatus();
    STRAIT_RETURN_IF_ERROR(Bind());
    if (row_width_ != width_) {
      return absl::FailedPreconditionError("klt: rows of another width than the basis's");
    }
    const uint64_t n = rows_ * rank_;
    STRAIT_RETURN_IF_ERROR(z_.Reserve(n));
    const float one = 1.0f, zero = 0.0f;
    const int d = static_cast<int>(width_), k = static_cast<int>(rank_);
    // Column-major z (k x rows) = analysis (k x d, stored as d x k) x (d x rows).
    STRAIT_RETURN_IF_ERROR(STRAIT_CUBLAS_CHECK(
        cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, k, static_cast<int>(rows_), d, &one,
                    analysis_.get(), d, x_.get(), d, &zero, z_.get(), k)));
    SubtractCentre<<<Blocks(n), kThreads, 0, stream_>>>(z_.get(), centre_.get(), n,
                                                        static_cast<uint32_t>(k));
    STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaGetLastError()));
    STRAIT_RETURN_IF_ERROR(Download(z_, n, z));
    return Synchronize();
  }

  absl::Status Inverse(const float* z, size_t rows, float* x) override {
    if (rows == 0) return absl::OkStatus();
    STRAIT_RETURN_IF_ERROR(Bind());
    STRAIT_RETURN_IF_ERROR(Upload(z, rows * rank_, z_));
    const uint64_t n = rows * width_;
    STRAIT_RETURN_IF_ERROR(x_.Reserve(n));
    const int d = static_cast<int>(width_), k = static_cast<int>(rank_);
    FillRows<<<Blocks(n), kThreads, 0, stream_>>>(x_.get(), mean_.get(), n,
                                                  static_cast<uint32_t>(d));
    STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaGetLastError()));
    const float one = 1.0f;
    // Column-major x (d x rows) += directions (k x d, stored as d x k) z (k x rows).
    STRAIT_RETURN_IF_ERROR(STRAIT_CUBLAS_CHECK(
        cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, d, static_cast<int>(rows), k, &one,
                    directions_.get(), d, z_.get(), k, &one, x_.get(), d)));
    rows_ = 0;  // x_ no longer holds loaded rows.
    STRAIT_RETURN_IF_ERROR(Download(x_, n, x));
    return Synchronize();
  }

 private:
  // Makes the device current on this thread; the stream and handle on first use.
  absl::Status Bind() {
    STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaSetDevice(device_)));
    if (handle_ != nullptr) return absl::OkStatus();
    if (stream_ == nullptr) {
      STRAIT_RETURN_IF_ERROR(
          STRAIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)));
    }
    STRAIT_RETURN_IF_ERROR(STRAIT_CUBLAS_CHECK(cublasCreate(&handle_)));
    const absl::Status set = [this] {
      STRAIT_RETURN_IF_ERROR(STRAIT_CUBLAS_CHECK(cublasSetStream(handle_, stream_)));
      return STRAIT_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH));
    }();
    if (!set.ok()) {
      (void)cublasDestroy(handle_);
      handle_ = nullptr;
    }
    return set;
  }

  // Host to device: from pageable memory, so `from` may go as soon as this returns.
  absl::Status Upload(const float* from, size_t n, DeviceFloats& to) {
    STRAIT_RETURN_IF_ERROR(to.Reserve(n));
    if (n == 0) return absl::OkStatus();
    return STRAIT_CUDA_CHECK(
        cudaMemcpyAsync(to.get(), from, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
  }
  absl::Status Download(const DeviceFloats& from, size_t n, float* to) {
    return STRAIT_CUDA_CHECK(
        cudaMemcpyAsync(to, from.get(), n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  }
  absl::Status Synchronize() { return STRAIT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  const int device_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t handle_ = nullptr;
  size_t width_ = 0, rank_ = 0;      // The basis's.
  size_t rows_ = 0, row_width_ = 0;  // The loaded rows'.
  DeviceFloats x_, z_, gram_, lagged_, analysis_, centre_, directions_, mean_;
};

}  // namespace

KltMathFactory CudaKltMath(int device) {
  return [device] { return std::make_unique<DeviceKltMath>(device); };
}

}  // namespace strait::compression
