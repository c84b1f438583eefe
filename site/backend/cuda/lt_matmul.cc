// cuBLASLt row-major products: see lt_matmul.h for the mapping and the epilogues' semantics.
//
// What the implementation relies on (cublasLt.h of CUDA 13 / cuBLAS 13.1, and the cuBLAS docs):
//  - CUBLASLT_MATMUL_DESC_BIAS_POINTER: "Bias vector length must match matrix D rows count"; for
//    BGRAD epilogues the same pointer receives the bias gradient (f32 here). Its type defaults to
//    D's; the heuristic refused an f32 bias or bias gradient beside a bf16 D on an H200 (cuBLAS
//    13.1), hence LtEpilogue::bias_type; a refusal makes Supports() false.
//  - CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: for GELU_AUX_BIAS / DGELU_BGRAD "must be divisible by 8
//    and be no less than the number of rows in the output matrix" (D's rows = our n).
//  - EPILOGUE_AUX_DATA_TYPE defaults to D's type; set only when aux_type differs. The same rule
//    (set an attribute only away from its default) for BIAS_DATA_TYPE.
//  - The heuristic reads the bias and aux pointer values to infer their alignment, and takes the
//    A/B/C/D alignments from the MIN_ALIGNMENT preferences (default 256 bytes): both go into the
//    plan key.
//  - CUBLAS_COMPUTE_32F with CUDA_R_32F scale: bf16 x bf16 -> f32 accumulate -> bf16 or f32 C;
//    f32 x f32 -> exact f32 (no TF32: that would be CUBLAS_COMPUTE_32F_FAST_TF32).
//  - In place (C == D) is allowed when C and D have the same layout: we pass one layout for both.
#include "site/backend/cuda/lt_matmul.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "site/backend/cuda/candidate_timing.h"

namespace strait::site {
namespace {

constexpr int kMaxHeuristicResults = 8;
constexpr uint32_t kMaxAlignment = 256;      // cuBLASLt's default (and largest) alignment class
constexpr uint32_t kEpilogueAlignment = 16;  // required of bias, bias_grad and aux

cudaDataType_t CudaType(DType t) { return t == DType::kF32 ? CUDA_R_32F : CUDA_R_16BF; }

// The largest power of two <= 256 that divides `address` (256 for 0: no constraint).
uint32_t AlignmentOf(uint64_t address) {
  uint32_t a = 1;
  while (a < kMaxAlignment && (address & a) == 0) a <<= 1;
  return a;
}

// The alignment every matrix of a (possibly batched) operand has.
uint32_t OperandAlignment(const void* p, int batch, int64_t stride, DType t) {
  uint32_t a = AlignmentOf(reinterpret_cast<uintptr_t>(p));
  if (batch > 1 && stride != 0) {
    a = std::min(a, AlignmentOf(static_cast<uint64_t>(stride) * SizeOf(t)));
  }
  return a;
}

enum class Epi : uint32_t {
  kDefault = CUBLASLT_EPILOGUE_DEFAULT,
  kBias = CUBLASLT_EPILOGUE_BIAS,
  kGelu = CUBLASLT_EPILOGUE_GELU,
  kGeluBias = CUBLASLT_EPILOGUE_GELU_BIAS,
  kGeluAux = CUBLASLT_EPILOGUE_GELU_AUX,
  kGeluAuxBias = CUBLASLT_EPILOGUE_GELU_AUX_BIAS,
  kDGelu = CUBLASLT_EPILOGUE_DGELU,
  kDGeluBGrad = CUBLASLT_EPILOGUE_DGELU_BGRAD,
};

const char* EpiName(Epi e) {
  switch (e) {
    case Epi::kDefault:
      return "DEFAULT";
    case Epi::kBias:
      return "BIAS";
    case Epi::kGelu:
      return "GELU";
    case Epi::kGeluBias:
      return "GELU_BIAS";
    case Epi::kGeluAux:
      return "GELU_AUX";
    case Epi::kGeluAuxBias:
      return "GELU_AUX_BIAS";
    case Epi::kDGelu:
      return "DGELU";
    case Epi::kDGeluBGrad:
      return "DGELU_BGRAD";
  }
  return "?";
}

// Which cuBLASLt epilogue the fields ask for (their consistency is checked by Validate).
Epi EpilogueOf(const LtEpilogue& e) {
  if (e.dgelu) return e.bias_grad != nullptr ? Epi::kDGeluBGrad : Epi::kDGelu;
  if (e.gelu) {
    if (e.aux != nullptr) return e.bias != nullptr ? Epi::kGeluAuxBias : Epi::kGeluAux;
    return e.bias != nullptr ? Epi::kGeluBias : Epi::kGelu;
  }
  return e.bias != nullptr ? Epi::kBias : Epi::kDefault;
}
bool HasAux(Epi e) {
  return e == Epi::kGeluAux || e == Epi::kGeluAuxBias || e == Epi::kDGelu || e == Epi::kDGeluBGrad;
}
bool HasBiasPointer(Epi e) {
  return e == Epi::kBias || e == Epi::kGeluBias || e == Epi::kGeluAuxBias || e == Epi::kDGeluBGrad;
}

// "m=.. n=.. k=.. ..." for error messages.
std::string Describe(const LtProduct& p, const LtEpilogue& e) {
  std::string s = absl::StrCat("[m=", p.m, " n=", p.n, " k=", p.k, " trans_a=", p.trans_a,
                               " trans_b=", p.trans_b, " lda=", p.lda, " ldb=", p.ldb,
                               " ldc=", p.ldc, " ab=", ToString(p.ab), " c=", ToString(p.c_type),
                               " alpha=", p.alpha, " beta=", p.beta);
  if (p.batch != 1) {
    absl::StrAppend(&s, " batch=", p.batch, " stride_a=", p.stride_a, " stride_b=", p.stride_b,
                    " stride_c=", p.stride_c);
  }
  const Epi epi = EpilogueOf(e);
  absl::StrAppend(&s, " epilogue=", EpiName(epi));
  if (e.bias != nullptr) absl::StrAppend(&s, " bias=", ToString(e.bias_type));
  if (HasAux(epi)) absl::StrAppend(&s, " aux=", ToString(e.aux_type), " ld_aux=", e.ld_aux);
  absl::StrAppend(&s, "]");
  return s;
}

absl::Status LtError(const char* call, cublasStatus_t status, const std::string& shape) {
  return absl::InternalError(absl::StrCat(call, " failed: ", cublasLtGetStatusName(status), " (",
                                          cublasLtGetStatusString(status), ") for ", shape));
}
absl::Status CudaError(const char* call, cudaError_t error, const std::string& context) {
  return absl::InternalError(absl::StrCat(call, " failed: ", cudaGetErrorName(error), " (",
                                          cudaGetErrorString(error), ")", context));
}

// Evaluates a cuBLASLt call once; on failure returns an Internal status naming the call and the
// shape (`shape` is evaluated only then, so it may be an expression like Describe(p, e)).
#define STRAIT_LT_RETURN_IF_ERROR(call, shape)           \
  do {                                                   \
    const cublasStatus_t strait_lt_status_ = (call);     \
    if (strait_lt_status_ != CUBLAS_STATUS_SUCCESS) {    \
      return LtError(#call, strait_lt_status_, (shape)); \
    }                                                    \
  } while (0)

template <typename T>
cublasStatus_t SetDesc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  return cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v));
}
template <typename T>
cublasStatus_t SetLayout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                         const T& v) {
  return cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof(v));
}
template <typename T>
cublasStatus_t SetPref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr,
                       const T& v) {
  return cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v));
}

// Arguments cuBLASLt would reject or that this class does not define. Host-side only.
absl::Status Validate(const LtProduct& p, const LtEpilogue& e) {
  auto invalid = [&](const char* why) {
    return absl::InvalidArgumentError(absl::StrCat("LtMatmul: ", why, " ", Describe(p, e)));
  };
  if (p.m <= 0 || p.n <= 0 || p.k <= 0) return invalid("m, n and k must be positive");
  if (p.a == nullptr || p.b == nullptr || p.c == nullptr) return invalid("null A, B or C");
  auto valid_type = [](DType t) { return t == DType::kF32 || t == DType::kBf16; };
  if (!valid_type(p.ab) || !valid_type(p.c_type)) return invalid("unknown operand type");
  if (p.lda < (p.trans_a ? p.m : p.k)) return invalid("lda below op(A)'s stored row length");
  if (p.ldb < (p.trans_b ? p.k : p.n)) return invalid("ldb below op(B)'s stored row length");
  if (p.ldc < p.n) return invalid("ldc < n");
  if (p.batch < 1) return invalid("batch < 1");
  if (p.batch > 1 && (p.stride_a < 0 || p.stride_b < 0 || p.stride_c < 0)) {
    return invalid("negative batch stride");
  }
  // Element alignment of A, B and C (cuBLASLt cannot read a bf16 at an odd address).
  if (OperandAlignment(p.a, p.batch, p.stride_a, p.ab) < static_cast<uint32_t>(SizeOf(p.ab)) ||
      OperandAlignment(p.b, p.batch, p.stride_b, p.ab) < static_cast<uint32_t>(SizeOf(p.ab)) ||
      OperandAlignment(p.c, p.batch, p.stride_c, p.c_type) <
          static_cast<uint32_t>(SizeOf(p.c_type))) {
    return invalid("A, B or C not aligned to its element size");
  }

  const bool any_epilogue =
      e.bias != nullptr || e.gelu || e.dgelu || e.aux != nullptr || e.bias_grad != nullptr;
  if (!any_epilogue) return absl::OkStatus();
  if (p.batch > 1) return invalid("no epilogue with batch > 1");
  if (e.gelu && e.dgelu) return invalid("gelu and dgelu together");
  if (e.dgelu && e.aux == nullptr) return invalid("dgelu needs aux (the forward pre-activation)");
  if (e.dgelu && e.bias != nullptr) return invalid("bias with dgelu (use bias_grad)");
  if (e.bias_grad != nullptr && !e.dgelu) return invalid("bias_grad without dgelu");
  if (e.aux != nullptr && !e.gelu && !e.dgelu) return invalid("aux without gelu or dgelu");
  if ((e.gelu || e.dgelu) && p.beta != 0.0f) return invalid("gelu / dgelu need beta == 0");
  if (e.bias != nullptr && !valid_type(e.bias_type)) return invalid("unknown bias type");
  if (e.aux != nullptr) {
    if (!valid_type(e.aux_type)) return invalid("unknown aux type");
    if (e.ld_aux < p.n || e.ld_aux % 8 != 0) {
      return invalid("ld_aux must be >= n and a multiple of 8 (cuBLASLt's EPILOGUE_AUX_LD rule)");
    }
  }
  return absl::OkStatus();
}

// Bias / bias_grad / aux alignment (FailedPrecondition: valid arguments, but not for this path).
absl::Status CheckEpilogueAlignment(const LtProduct& p, const LtEpilogue& e) {
  const Epi epi = EpilogueOf(e);
  const void* bias = epi == Epi::kDGeluBGrad ? static_cast<const void*>(e.bias_grad)
                                             : static_cast<const void*>(e.bias);
  if (HasBiasPointer(epi) && AlignmentOf(reinterpret_cast<uintptr_t>(bias)) < kEpilogueAlignment) {
    return absl::FailedPreconditionError(
        absl::StrCat("LtMatmul: bias / bias_grad not 16-byte aligned ", Describe(p, e)));
  }
  if (HasAux(epi) && AlignmentOf(reinterpret_cast<uintptr_t>(e.aux)) < kEpilogueAlignment) {
    return absl::FailedPreconditionError(
        absl::StrCat("LtMatmul: aux not 16-byte aligned ", Describe(p, e)));
  }
  return absl::OkStatus();
}

// Everything the chosen algorithm may depend on (see LtMatmul::Run in the header).
struct PlanKey {
  static constexpr int kFields = 24;
  std::array<int64_t, kFields> f{};

  static PlanKey Of(const LtProduct& p, const LtEpilogue& e) {
    const Epi epi = EpilogueOf(e);
    const bool batched = p.batch > 1;
    const bool aux = HasAux(epi);
    const void* bias = epi == Epi::kDGeluBGrad ? static_cast<const void*>(e.bias_grad)
                                               : static_cast<const void*>(e.bias);
    PlanKey key;
    key.f = {p.trans_a,
             p.trans_b,
             p.m,
             p.n,
             p.k,
             p.lda,
             p.ldb,
             p.ldc,
             static_cast<int64_t>(p.ab),
             static_cast<int64_t>(p.c_type),
             p.batch,
             batched ? p.stride_a : 0,
             batched ? p.stride_b : 0,
             batched ? p.stride_c : 0,
             p.beta == 0.0f,
             static_cast<int64_t>(epi),
             aux ? static_cast<int64_t>(e.aux_type) : -1,
             aux ? e.ld_aux : 0,
             OperandAlignment(p.a, p.batch, p.stride_a, p.ab),
             OperandAlignment(p.b, p.batch, p.stride_b, p.ab),
             OperandAlignment(p.c, p.batch, p.stride_c, p.c_type),
             HasBiasPointer(epi) ? AlignmentOf(reinterpret_cast<uintptr_t>(bias)) : 0,
             aux ? AlignmentOf(reinterpret_cast<uintptr_t>(e.aux)) : 0,
             e.bias != nullptr ? static_cast<int64_t>(e.bias_type) : -1};
    return key;
  }
  bool operator==(const PlanKey& o) const { return f == o.f; }
};

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int64_t v : k.f) {
      h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
      h *= 0x100000001b3ull;
    }
    return static_cast<size_t>(h);
  }
};

// The descriptors and the algorithm for one plan key. Per call only the pointers (operands, bias,
// aux) and alpha/beta change.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr;  // cuBLASLt's A = our B
  cublasLtMatrixLayout_t layout_b = nullptr;  // cuBLASLt's B = our A
  cublasLtMatrixLayout_t layout_c = nullptr;  // C and D (in place)
  // Every algorithm the heuristic offered that fits the workspace, its first choice first, and the
  // one that runs: the first, or with timed choice the fastest (`timed` once chosen).
  std::vector<cublasLtMatmulAlgo_t> candidates;
  size_t chosen = 0;
  bool timed = false;
  Epi epilogue = Epi::kDefault;
  absl::Status status;  // OK when supported; else why not (Unimplemented)

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (layout_c != nullptr) cublasLtMatrixLayoutDestroy(layout_c);
    if (layout_b != nullptr) cublasLtMatrixLayoutDestroy(layout_b);
    if (layout_a != nullptr) cublasLtMatrixLayoutDestroy(layout_a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

// Points the descriptor's epilogue pointers at this call's buffers.
absl::Status SetEpiloguePointers(const Plan& plan, const LtProduct& p, const LtEpilogue& e) {
  if (HasBiasPointer(plan.epilogue)) {
    const void* bias = plan.epilogue == Epi::kDGeluBGrad ? static_cast<const void*>(e.bias_grad)
                                                         : static_cast<const void*>(e.bias);
    STRAIT_LT_RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias),
                              Describe(p, e));
  }
  if (HasAux(plan.epilogue)) {
    STRAIT_LT_RETURN_IF_ERROR(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, e.aux),
                              Describe(p, e));
  }
  return absl::OkStatus();
}

// The operation descriptor: f32 compute, the transposes and the epilogue, with this call's
// epilogue pointers.
absl::Status SetOperation(const LtProduct& p, const LtEpilogue& e, const std::string& shape,
                          Plan* plan) {
  // The operation: f32 compute and f32 alpha/beta (host pointers, the default pointer mode).
  STRAIT_LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                            shape);
  const int32_t trans_a = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  const int32_t trans_b = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's B is our A
  STRAIT_LT_RETURN_IF_ERROR(SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, trans_a), shape);
  STRAIT_LT_RETURN_IF_ERROR(SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, trans_b), shape);
  const uint32_t epilogue = static_cast<uint32_t>(plan->epilogue);
  STRAIT_LT_RETURN_IF_ERROR(SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue), shape);
  // The bias gradient is f32, the bias bias_type; cuBLASLt's default is D's type.
  const DType bias_type = plan->epilogue == Epi::kDGeluBGrad ? DType::kF32 : e.bias_type;
  if (HasBiasPointer(plan->epilogue) && p.c_type != bias_type) {
    const int32_t cuda_bias_type = CudaType(bias_type);
    STRAIT_LT_RETURN_IF_ERROR(
        SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, cuda_bias_type), shape);
  }
  if (HasAux(plan->epilogue)) {
    const int64_t ld_aux = e.ld_aux;
    STRAIT_LT_RETURN_IF_ERROR(SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld_aux),
                              shape);
    if (e.aux_type != p.c_type) {
      const int32_t aux_type = CudaType(e.aux_type);
      STRAIT_LT_RETURN_IF_ERROR(
          SetDesc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, aux_type), shape);
    }
  }
  // The heuristic infers the bias / aux alignment from the pointers' values: set the real ones.
  return SetEpiloguePointers(*plan, p, e);
}

// The layouts of cuBLASLt's A, B and C = D (strided batches when batch > 1).
absl::Status SetLayouts(const LtProduct& p, const std::string& shape, Plan* plan) {
  const cudaDataType_t ab = CudaType(p.ab);
  const cudaDataType_t c = CudaType(p.c_type);
  // Layouts, column-major (see the table in lt_matmul.h).
  const uint64_t m = static_cast<uint64_t>(p.m), n = static_cast<uint64_t>(p.n),
                 k = static_cast<uint64_t>(p.k);
  STRAIT_LT_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&plan->layout_a, ab, p.trans_b ? k : n, p.trans_b ? n : k, p.ldb),
      shape);
  STRAIT_LT_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&plan->layout_b, ab, p.trans_a ? m : k, p.trans_a ? k : m, p.lda),
      shape);
  STRAIT_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->layout_c, c, n, m, p.ldc), shape);
  if (p.batch > 1) {
    const int32_t batch = p.batch;
    const int64_t stride_lt_a = p.stride_b, stride_lt_b = p.stride_a, stride_c = p.stride_c;
    STRAIT_LT_RETURN_IF_ERROR(SetLayout(plan->layout_a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch),
                              shape);
    STRAIT_LT_RETURN_IF_ERROR(
        SetLayout(plan->layout_a, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride_lt_a), shape);
    STRAIT_LT_RETURN_IF_ERROR(SetLayout(plan->layout_b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch),
                              shape);
    STRAIT_LT_RETURN_IF_ERROR(
        SetLayout(plan->layout_b, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride_lt_b), shape);
    STRAIT_LT_RETURN_IF_ERROR(SetLayout(plan->layout_c, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch),
                              shape);
    STRAIT_LT_RETURN_IF_ERROR(
        SetLayout(plan->layout_c, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride_c), shape);
  }
  return absl::OkStatus();
}

// Asks the heuristic for an algorithm that fits the workspace: plan->status says which, or why
// none (Unimplemented). An error status: a cuBLASLt call failed.
absl::Status ChooseAlgorithm(cublasLtHandle_t handle, size_t workspace_bytes, const LtProduct& p,
                             const std::string& shape, Plan* plan) {
  // Preferences: the workspace, and the operands' actual alignments (cuBLASLt assumes 256 bytes
  // otherwise and may pick a kernel that faults on less-aligned buffers).
  cublasLtMatmulPreference_t pref = nullptr;
  STRAIT_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref), shape);
  struct PrefGuard {
    cublasLtMatmulPreference_t p;
    ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
  } pref_guard{pref};
  const uint64_t max_workspace = workspace_bytes;
  const uint32_t align_lt_a = OperandAlignment(p.b, p.batch, p.stride_b, p.ab);
  const uint32_t align_lt_b = OperandAlignment(p.a, p.batch, p.stride_a, p.ab);
  const uint32_t align_c = OperandAlignment(p.c, p.batch, p.stride_c, p.c_type);
  STRAIT_LT_RETURN_IF_ERROR(SetPref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, max_workspace),
                            shape);
  STRAIT_LT_RETURN_IF_ERROR(SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_lt_a),
                            shape);
  STRAIT_LT_RETURN_IF_ERROR(SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_lt_b),
                            shape);
  STRAIT_LT_RETURN_IF_ERROR(SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c),
                            shape);
  STRAIT_LT_RETURN_IF_ERROR(SetPref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_c),
                            shape);

  std::array<cublasLtMatmulHeuristicResult_t, kMaxHeuristicResults> results{};
  int returned = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(
      handle, plan->desc, plan->layout_a, plan->layout_b, plan->layout_c, plan->layout_c, pref,
      kMaxHeuristicResults, results.data(), &returned);
  if (hs != CUBLAS_STATUS_SUCCESS) {
    // NOT_SUPPORTED is the documented "no algorithm"; INVALID_VALUE is what an unsupported type /
    // epilogue combination yields. Both mean: use separate kernels. Cached.
    plan->status = absl::UnimplementedError(
        absl::StrCat("cublasLtMatmulAlgoGetHeuristic: ", cublasLtGetStatusName(hs), " (",
                     cublasLtGetStatusString(hs), ") for ", shape));
    return absl::OkStatus();
  }
  for (int i = 0; i < returned && i < kMaxHeuristicResults; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= workspace_bytes) {
      plan->candidates.push_back(results[i].algo);
    }
  }
  if (plan->candidates.empty()) {
    plan->status = absl::UnimplementedError(absl::StrCat(
        "cublasLtMatmulAlgoGetHeuristic: no algorithm (", returned, " results) for ", shape));
    return absl::OkStatus();
  }
  plan->status = absl::OkStatus();
  return absl::OkStatus();
}

// Builds the descriptors and asks the heuristic. An error status: a cuBLASLt call failed (nothing
// is cached). OK with plan->status not OK: cuBLASLt has no algorithm (cached).
absl::Status BuildPlan(cublasLtHandle_t handle, size_t workspace_bytes, const LtProduct& p,
                       const LtEpilogue& e, const std::string& shape, Plan* plan) {
  plan->epilogue = EpilogueOf(e);
  if (absl::Status s = SetOperation(p, e, shape, plan); !s.ok()) return s;
  if (absl::Status s = SetLayouts(p, shape, plan); !s.ok()) return s;
  return ChooseAlgorithm(handle, workspace_bytes, p, shape, plan);
}

}  // namespace

struct LtMatmul::Impl {
  int device = -1;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::unordered_map<PlanKey, std::unique_ptr<Plan>, PlanKeyHash> plans;
  bool stream_used = false;  // whether a product was ever queued
  AlgorithmChoice choice = AlgorithmChoice::kHeuristic;
  bool verbose = false;  // STRAIT_LT_VERBOSE: each plan on stderr as it is built or timed

  ~Impl() {
    if (stream_used) cudaStreamSynchronize(stream);  // the workspace may still be in use
    plans.clear();
    if (workspace != nullptr) cudaFree(workspace);
    if (handle != nullptr) cublasLtDestroy(handle);
  }

  // The plan for this key, built on first use. Errors: a cuBLASLt call failed while building.
  absl::StatusOr<Plan*> GetPlan(const LtProduct& p, const LtEpilogue& e) {
    const PlanKey key = PlanKey::Of(p, e);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second.get();
    auto plan = std::make_unique<Plan>();
    if (absl::Status s = BuildPlan(handle, workspace_bytes, p, e, Describe(p, e), plan.get());
        !s.ok()) {
      return s;
    }
    if (verbose) {
      std::fprintf(stderr, "LtMatmul plan: %s: %s, %zu candidates\n", Describe(p, e).c_str(),
                   plan->status.ok() ? "supported" : std::string(plan->status.message()).c_str(),
                   plan->candidates.size());
    }
    Plan* raw = plan.get();
    plans.emplace(key, std::move(plan));
    return raw;
  }
  // cuBLASLt's A is our B, its B is our A; C and D are both our C (in place, one layout).
  cublasStatus_t Launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo, const LtProduct& p) {
    const float alpha = p.alpha, beta = p.beta;
    stream_used = true;
    return cublasLtMatmul(handle, plan.desc, &alpha, p.b, plan.layout_a, p.a, plan.layout_b, &beta,
                          p.c, plan.layout_c, p.c, plan.layout_c, &algo, workspace, workspace_bytes,
                          stream);
  }

  // Times each candidate on this call's operands and keeps the fastest. An accumulating
  // product's C is preserved across the trials; the epilogue outputs (aux, bias gradient) are
  // overwritten with the same values by every run.
  absl::Status ChooseFastest(Plan& plan, const LtProduct& p, const LtEpilogue& e) {
    plan.timed = true;
    const int64_t c_elements =
        (p.batch > 1 ? (p.batch - 1) * p.stride_c : 0) + int64_t{p.m - 1} * p.ldc + p.n;
    const size_t c_bytes = p.beta != 0.0f ? c_elements * SizeOf(p.c_type) : 0;
    absl::StatusOr<CandidateTimes> timed = TimeCandidates(
        stream, static_cast<int>(plan.candidates.size()),
        [&](int i) { return Launch(plan, plan.candidates[i], p) == CUBLAS_STATUS_SUCCESS; }, p.c,
        c_bytes);
    if (!timed.ok()) {
      return absl::Status(timed.status().code(),
                          absl::StrCat(timed.status().message(), " ", Describe(p, e)));
    }
    if (timed->fastest >= 0) plan.chosen = timed->fastest;
    if (verbose) {
      std::fprintf(stderr, "LtMatmul timed: %s: ms %s\n", Describe(p, e).c_str(),
                   timed->times.c_str());
    }
    return absl::OkStatus();
  }

  absl::Status CheckDevice(const LtProduct& p, const LtEpilogue& e) const {
    int current = -1;
    const cudaError_t err = cudaGetDevice(&current);
    if (err != cudaSuccess) return CudaError("cudaGetDevice", err, " " + Describe(p, e));
    if (current != device) {
      return absl::FailedPreconditionError(
          absl::StrCat("LtMatmul: created on device ", device, ", current device is ", current));
    }
    return absl::OkStatus();
  }
};

LtMatmul::LtMatmul(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LtMatmul::~LtMatmul() = default;

absl::StatusOr<std::unique_ptr<LtMatmul>> LtMatmul::Create(cudaStream_t stream,
                                                           AlgorithmChoice choice,
                                                           size_t workspace_bytes) {
  auto impl = std::make_unique<Impl>();
  impl->stream = stream;
  impl->choice = choice;
  const char* verbose = std::getenv("STRAIT_LT_VERBOSE");
  impl->verbose = verbose != nullptr && std::string_view(verbose) != "0";
  // Fails cleanly (cudaErrorNoDevice / cudaErrorInsufficientDriver) on a machine without a GPU.
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    return CudaError("cudaGetDeviceCount", err, " (LtMatmul::Create)");
  }
  if (count == 0) return absl::FailedPreconditionError("LtMatmul::Create: no CUDA device");
  if (cudaError_t err = cudaGetDevice(&impl->device); err != cudaSuccess) {
    return CudaError("cudaGetDevice", err, " (LtMatmul::Create)");
  }
  if (cublasStatus_t s = cublasLtCreate(&impl->handle); s != CUBLAS_STATUS_SUCCESS) {
    impl->handle = nullptr;
    return LtError("cublasLtCreate", s, "LtMatmul::Create");
  }
  if (workspace_bytes > 0) {
    // cudaMalloc returns 256-byte-aligned memory, the alignment cuBLASLt wants of its workspace.
    if (cudaError_t err = cudaMalloc(&impl->workspace, workspace_bytes); err != cudaSuccess) {
      impl->workspace = nullptr;
      return CudaError("cudaMalloc", err,
                       absl::StrCat(" (LtMatmul workspace of ", workspace_bytes, " bytes)"));
    }
  }
  impl->workspace_bytes = workspace_bytes;
  return std::unique_ptr<LtMatmul>(new LtMatmul(std::move(impl)));
}

bool LtMatmul::Supports(const LtProduct& p, const LtEpilogue& e) {
  if (!Validate(p, e).ok() || !CheckEpilogueAlignment(p, e).ok()) return false;
  absl::StatusOr<Plan*> plan = impl_->GetPlan(p, e);
  return plan.ok() && (*plan)->status.ok();
}

absl::Status LtMatmul::Run(const LtProduct& p, const LtEpilogue& e) {
  if (absl::Status s = Validate(p, e); !s.ok()) return s;
  if (absl::Status s = CheckEpilogueAlignment(p, e); !s.ok()) return s;
  if (absl::Status s = impl_->CheckDevice(p, e); !s.ok()) return s;
  absl::StatusOr<Plan*> found = impl_->GetPlan(p, e);
  if (!found.ok()) return found.status();
  Plan& plan = **found;
  if (!plan.status.ok()) return plan.status;

  if (absl::Status s = SetEpiloguePointers(plan, p, e); !s.ok()) return s;
  if (impl_->choice == AlgorithmChoice::kTimed && !plan.timed && plan.candidates.size() > 1) {
    if (absl::Status s = impl_->ChooseFastest(plan, p, e); !s.ok()) return s;
  }
  const cublasStatus_t status = impl_->Launch(plan, plan.candidates[plan.chosen], p);
  if (status != CUBLAS_STATUS_SUCCESS) return LtError("cublasLtMatmul", status, Describe(p, e));
  return absl::OkStatus();
}

size_t LtMatmul::CachedPlans() const { return impl_->plans.size(); }

}  // namespace strait::site
