// Encoding a tensor that lives on a GPU: the chain's value stage runs as a CUDA kernel, only its
// (smaller) output crosses to the host, and the host finishes the frame (shuffle, zstd, header).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compression/codec_chain.h"

namespace strait::compression {

// Same frame as chain.Encode on the tensor's host copy (byte-identical) for chains whose value
// stage is none, fp16, bf16, int8 or int4; topk chains are Unimplemented here (use TopKIndices).
// `values` is a device pointer of product(shape) floats. Blocks until the payload is on the host.
// The span points into `chain`'s buffer (valid until its next Encode); not thread-safe per chain.
absl::StatusOr<absl::Span<const uint8_t>> EncodeOnDevice(CodecChain& chain, const float* values,
                                                         absl::Span<const uint64_t> shape,
                                                         cudaStream_t stream);

}  // namespace strait::compression
