#include "compression/cuda/device_codec.h"

#include <vector>

#include "compression/cuda/codec_kernels.h"
#include "compression/quantize_stage.h"
#include "core/library_check.h"
#include "core/status.h"

namespace strait::compression {

absl::StatusOr<absl::Span<const uint8_t>> EncodeOnDevice(CodecChain& chain, const float* values,
                                                         absl::Span<const uint64_t> shape,
                                                         cudaStream_t stream) {
  STRAIT_ASSIGN_OR_RETURN(uint64_t n, ElementCount(shape));
  const StageSpec& stage = chain.spec().stages[0];
  uint64_t bytes = 0;
  switch (stage.kind) {
    case StageKind::kNone:
      bytes = 4 * n;
      break;
    case StageKind::kFp16:
    case StageKind::kBf16:
      bytes = 2 * n;
      break;
    case StageKind::kInt8:
      bytes = QuantizedSize(8, n, stage.block_size);
      break;
    case StageKind::kInt4:
      bytes = QuantizedSize(4, n, stage.block_size);
      break;
    default:
      return absl::UnimplementedError(
          "EncodeOnDevice: the chain must start with none, fp16, bf16, int8 or int4");
  }
  std::vector<uint8_t> host(bytes);
  if (bytes > 0) {
    uint8_t* device = nullptr;
    STRAIT_RETURN_IF_ERROR(
        STRAIT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&device), bytes, stream)));
    absl::Status launched;
    switch (stage.kind) {
      case StageKind::kNone:
        launched = STRAIT_CUDA_CHECK(
            cudaMemcpyAsync(device, values, bytes, cudaMemcpyDeviceToDevice, stream));
        break;
      case StageKind::kFp16:
      case StageKind::kBf16:
        launched = CastToHalfOnDevice(values, n, stage.kind == StageKind::kBf16, device, stream);
        break;
      default:
        launched =
            QuantizeOnDevice(values, n, stage.kind == StageKind::kInt8 ? 8 : 4, stage.block_size,
                             stage.stochastic, chain.next_seed(), device, stream);
        break;
    }
    cudaError_t error = cudaSuccess;
    if (launched.ok()) {
      error = cudaMemcpyAsync(host.data(), device, bytes, cudaMemcpyDeviceToHost, stream);
      if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
    }
    cudaFreeAsync(device, stream);
    STRAIT_RETURN_IF_ERROR(launched);
    STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(error));
  }
  return chain.EncodeValuePayload(host, shape);
}

}  // namespace strait::compression
