// Row-major matrix products through cuBLASLt: typed operands (bf16 on the tensor cores, or exact
// f32), f32 accumulation, one workspace, the algorithm chosen once per shape, and the epilogues a
// transformer's MLP needs (bias, GELU with the pre-activation saved, and the GELU backward with the
// bias gradient). Host code only (compiled by the host compiler); link CUDA::cublasLt.
//
// Row-major -> column-major (cuBLASLt is column-major). A row-major X[r, c] with row stride ld is,
// byte for byte, the column-major X^T[c, r] with leading dimension ld. So row-major
// C[m, n] = op(A) op(B) is column-major C^T[n, m] = op(B)^T op(A)^T, and cuBLASLt runs with
//   cuBLASLt M = n, N = m, K = k;  its "A" is our B, its "B" is our A;  its D = C is C^T[n, m].
//   operand      stored row-major       cuBLASLt layout (rows, cols, ld)   cuBLASLt op
//   our B  !tb   [k, n], ldb            (n, k, ldb)                        TRANSA = N
//   our B   tb   [n, k], ldb            (k, n, ldb)                        TRANSA = T
//   our A  !ta   [m, k], lda            (k, m, lda)                        TRANSB = N
//   our A   ta   [k, m], lda            (m, k, lda)                        TRANSB = T
//   C = D        [m, n], ldc            (n, m, ldc)                        (C is never transposed)
//   aux          [m, n], ld_aux         (n, m, ld_aux)   ld_aux % 8 == 0 and ld_aux >= n
// cuBLASLt's bias has the length of D's rows = n and is broadcast along D's columns, so it is
// indexed by our column j: t[i, j] = product[i, j] + bias[j]. Its bias gradient (BGRAD epilogues)
// is likewise one value per D row = per our column j, reduced over D's columns = our m rows.
//
// Not thread-safe: one LtMatmul per stream, used from one thread at a time. Every failure is an
// absl::Status naming the cuBLASLt / CUDA call and the product's shape; nothing aborts.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "site/backend/dtype.h"

namespace strait::site {

// Row-major: C[m, n] = alpha * op(A) op(B) + beta * C, op(A) [m, k] (A stored [k, m] when
// trans_a), op(B) [k, n] (B stored [n, k] when trans_b); leading dimensions are row strides in
// elements. C is read only when beta != 0 (with beta == 0 it may hold anything, NaN included).
struct LtProduct {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int lda = 0;
  const void* b = nullptr;
  int ldb = 0;
  void* c = nullptr;
  int ldc = 0;
  // Type of A and B (both): kBf16 (tensor cores) or kF32 (then exact fp32: CUBLAS_COMPUTE_32F,
  // TF32 is never allowed). Accumulation and alpha/beta are f32 in both cases.
  DType ab = DType::kBf16;
  DType c_type = DType::kBf16;  // type of C (and of D = C: the product is in place)
  float alpha = 1.0f, beta = 0.0f;
  // Strided batch: matrix i of X starts stride_x elements after matrix i-1. No epilogue is allowed
  // with batch > 1. Strides are ignored when batch == 1.
  int batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// Epilogues (row-major terms; "column" = one of the n columns of C). Which cuBLASLt epilogue runs:
//   nothing set                  DEFAULT         C = alpha AB + beta C
//   bias                         BIAS            C = alpha AB + beta C + bias[column]
//   gelu (+ bias) (+ aux)        GELU[_AUX][_BIAS]   t = alpha AB (+ bias[column]); C =
//   gelu_tanh(t);
//                                                aux = t when aux is set. Requires beta == 0.
//   dgelu + aux (+ bias_grad)    DGELU[_BGRAD]   C = (alpha AB) * gelu_tanh'(aux);
//   bias_grad[column]
//                                                = sum over the m rows of C. Requires beta == 0.
// bias, bias_grad and aux must be 16-byte aligned (else Supports() is false and Run() fails).
struct LtEpilogue {
  const void* bias = nullptr;  // forward: t = product + bias[column] (length n, of bias_type)
  // f32, or bf16 with a bf16 C: cuBLASLt refuses an f32 bias beside a bf16 C (seen on an H200,
  // cuBLAS 13.1: INVALID_VALUE from the heuristic).
  DType bias_type = DType::kF32;
  bool gelu = false;  // forward: C = gelu_tanh(t); `aux` receives t (the pre-activation)
  bool dgelu =
      false;  // backward: C = product * gelu'(aux) where aux holds the forward's pre-activation
  void* aux = nullptr;
  DType aux_type = DType::kBf16;
  int ld_aux = 0;              // same [m, n] shape as C
  float* bias_grad = nullptr;  // with dgelu: bias_grad[column] = sum over rows of C's values (f32,
                               // length n, OVERWRITTEN)
};

// How a plan's algorithm is chosen: the heuristic's first choice (the same in every process), or
// the fastest of its candidates timed on the plan's first call (faster where the heuristic misses;
// the choice can differ between processes, and with it the last bits of the results).
enum class AlgorithmChoice { kHeuristic, kTimed };

class LtMatmul {
 public:
  // A cuBLASLt handle and a workspace of `workspace_bytes` on the current device (32 MiB is what
  // cuBLAS recommends for Hopper); every product is queued on `stream`. Fails (never crashes)
  // without a usable GPU. STRAIT_LT_VERBOSE=1 prints each plan (and timing) on stderr.
  static absl::StatusOr<std::unique_ptr<LtMatmul>> Create(
      cudaStream_t stream, AlgorithmChoice choice = AlgorithmChoice::kHeuristic,
      size_t workspace_bytes = 32 << 20);
  ~LtMatmul();  // waits for the stream, then frees the workspace and every cached descriptor
  LtMatmul(const LtMatmul&) = delete;
  LtMatmul& operator=(const LtMatmul&) = delete;

  // Whether cuBLASLt has an algorithm for this product + epilogue (cached). Takes the arguments Run
  // would take: the pointers' alignments are part of the question. False for arguments Run would
  // reject. Enqueues nothing.
  bool Supports(const LtProduct& p, const LtEpilogue& e);

  // Queues the product on the stream. The first time a plan key is seen, the descriptors are built
  // and cublasLtMatmulAlgoGetHeuristic offers algorithms (with kTimed, the first Run times them,
  // synchronising the stream); later calls only swap the pointers and alpha/beta. The plan key is
  // every field of LtProduct and LtEpilogue except the pointers' values and alpha/beta's values,
  // plus:
  //   - each pointer's alignment class (the largest power of two <= 256 dividing its address, and,
  //     with batch > 1, the batch stride in bytes): the heuristic filters algorithms by the
  //     MIN_ALIGNMENT preferences (A, B, C, D) and by the bias / aux pointers' values, so an
  //     algorithm chosen for 256-byte-aligned buffers may not run on 16-byte-aligned ones;
  //   - whether beta == 0 (the heuristic does not see beta; the key separates the two anyway, so
  //     a plan built for an overwrite is never reused for an accumulation or vice versa).
  // Errors: InvalidArgument (bad shape / arguments), FailedPrecondition (wrong device, misaligned
  // epilogue pointer), Unimplemented (no cuBLASLt algorithm: use separate kernels), Internal (a
  // cuBLASLt or CUDA call failed).
  absl::Status Run(const LtProduct& p, const LtEpilogue& e = {});

  // Plans built so far (supported or not), for tests.
  size_t CachedPlans() const;

 private:
  struct Impl;
  explicit LtMatmul(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace strait::site
