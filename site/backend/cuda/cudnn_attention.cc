// cuDNN flash attention through the backend graph API; see cudnn_attention.h for the route taken
// and why. The graphs below mirror, operation by operation and tensor by tensor (dims, strides,
// data types, virtual flags), what cudnn-frontend's CompositeSDPANode / CompositeSDPABackwardNode
// send to cuDNN 9.10-9.20 for a bf16 training SDPA with a scale tensor, an optional top-left causal
// mask, no bias, no dropout, no padding (github.com/NVIDIA/cudnn-frontend,
// include/cudnn_frontend/node/scaled_dot_product_flash_attention.h and the nodes it expands into).
// Conventions taken from there:
//  * io tensors are bf16; every virtual (intermediate) tensor is fp32 unless noted (the frontend's
//    Tensor_attributes::fill_from_context: virtual -> intermediate type FLOAT, else io type);
//    every compute type is FLOAT except the comparison of the causal mask (BOOLEAN).
//  * the backend wants K^T (and V^T in the backward) as [n, h, dh, s_kv] views: K's dims and
//    strides with the last two swapped.
//  * the softmax input of the second matmul, and the transposed P / dS fed to the dV / dK matmuls,
//    are virtual tensors of the io type (bf16): "Requirement by cudnn backend to take in bmm2 aType
//    as i/o type".
//  * scalars (attention scale, mask value -inf, 1.0) are pass-by-value fp32 [1,1,1,1] tensors whose
//    variant-pack pointer is a host pointer to the value.
//  * pointwise inputs IN_0/IN_1/IN_2 are XDESC/BDESC/TDESC; BINARY_SELECT(x, b, t) keeps x where t.
//  * the backward's softmax_sum (rowsum(dO*O)) and, in the non-deterministic variant, the fp32 dQ
//    accumulator are non-virtual tensors the caller places in its workspace (the frontend's
//    collect_tensors_in_workspace_node); since cuDNN 9.6 the accumulator needs no memset by the
//    caller, this code zeroes it anyway.
#include "site/backend/cuda/cudnn_attention.h"

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "compression/cuda/cuda_check.h"
#include "core/status.h"

// A cuDNN call (include <cudnn.h> first): "<file>:<line>: <expr>: CUDNN_STATUS_...(<code>): <what
// cudnnGetLastErrorString says>". Same contract as STRAIT_CUBLAS_CHECK in
// compression/cuda/cuda_check.h.
#define STRAIT_CUDNN_CHECK(expr)                                                              \
  ::strait::compression::LibraryCallStatus<cudnnStatus_t>(                                    \
      (expr), CUDNN_STATUS_SUCCESS,                                                           \
      [](cudnnStatus_t e) {                                                                   \
        char strait_cudnn_last_[512] = {};                                                    \
        cudnnGetLastErrorString(strait_cudnn_last_, sizeof(strait_cudnn_last_));              \
        return ::absl::StrCat(cudnnGetErrorString(e), " (", static_cast<int>(e), ")",         \
                              strait_cudnn_last_[0] != '\0' ? ": " : "", strait_cudnn_last_); \
      },                                                                                      \
      #expr, __FILE__, __LINE__)

namespace strait::site {
namespace cudnn_attention_internal {

// An owned backend descriptor.
class Desc {
 public:
  Desc() = default;
  explicit Desc(cudnnBackendDescriptor_t d) : d_(d) {}
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc& operator=(Desc&& o) noexcept {
    if (this != &o) {
      Reset();
      d_ = std::exchange(o.d_, nullptr);
    }
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc() { Reset(); }

  cudnnBackendDescriptor_t get() const { return d_; }
  void Reset() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
    d_ = nullptr;
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

// Destroys descriptors last-created first (plans before the graphs, graphs before the operations,
// operations before the tensors they reference).
void DestroyInReverse(std::vector<Desc>& descs) {
  while (!descs.empty()) descs.pop_back();
}

// Unique ids of the non-virtual tensors; virtual ones count up from kFirstVirtualUid.
constexpr int64_t kUidQ = 1;
constexpr int64_t kUidK = 2;  // K^T view in both graphs
constexpr int64_t kUidV = 3;  // V in the forward, V^T view in the backward
constexpr int64_t kUidO = 4;
constexpr int64_t kUidStats = 5;
constexpr int64_t kUidScale = 6;
constexpr int64_t kUidMaskValue = 7;
constexpr int64_t kUidDO = 8;
constexpr int64_t kUidDQ = 9;
constexpr int64_t kUidDK = 10;
constexpr int64_t kUidDV = 11;
constexpr int64_t kUidOne = 12;
constexpr int64_t kUidSoftmaxSum = 13;
constexpr int64_t kUidDQAccum = 14;
constexpr int64_t kFirstVirtualUid = 1000;

constexpr int64_t kByteAlignment = 16;
constexpr size_t kScratchAlignment = 256;
// Above this the deterministic backward's workspace (about n*heads*tokens^2*2 bytes) is not worth
// it: the fp32-accumulator graph is used instead.
constexpr size_t kMaxDeterministicWorkspaceBytes = size_t{2} << 30;
// At most this many engine configs are tried per heuristics mode.
constexpr int64_t kMaxEngineConfigs = 64;

using Dims = std::array<int64_t, 4>;

size_t RoundUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

absl::StatusOr<Desc> CreateDesc(cudnnBackendDescriptorType_t type, absl::string_view what) {
  cudnnBackendDescriptor_t d = nullptr;
  absl::Status s = STRAIT_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d));
  if (!s.ok()) {
    return Annotate(s, absl::StrCat(what, ": create descriptor type ", static_cast<int>(type)));
  }
  return Desc(d);
}

absl::Status SetAttr(cudnnBackendDescriptor_t d, absl::string_view what, const char* attr_name,
                     cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type,
                     int64_t count, const void* values) {
  return Annotate(STRAIT_CUDNN_CHECK(cudnnBackendSetAttribute(d, attr, type, count, values)),
                  absl::StrCat(what, ": set ", attr_name));
}

absl::Status FinalizeDesc(cudnnBackendDescriptor_t d, absl::string_view what) {
  return Annotate(STRAIT_CUDNN_CHECK(cudnnBackendFinalize(d)), absl::StrCat(what, ": finalize"));
}

// Passes an attribute as its name (for messages) and its value.
#define STRAIT_ATTR(a) #a, a

// What a finalized engine config says about its engine (best effort: unknown when the queries
// fail).
struct EngineInfo {
  int64_t global_index = -1;
  bool notes_known = false;
  bool nondeterministic = false;
  std::string notes;
};

EngineInfo DescribeEngine(cudnnBackendDescriptor_t cfg) {
  EngineInfo info;
  cudnnBackendDescriptor_t raw = nullptr;
  if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &raw) != CUDNN_STATUS_SUCCESS) {
    return info;
  }
  Desc engine(raw);
  int64_t count = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &count, &raw) != CUDNN_STATUS_SUCCESS ||
      count != 1) {
    return info;
  }
  int64_t index = -1;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                               &count, &index) == CUDNN_STATUS_SUCCESS &&
      count == 1) {
    info.global_index = index;
  }
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  count = 0;
  if (cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                               CUDNN_TYPE_NUMERICAL_NOTE, static_cast<int64_t>(notes.size()),
                               &count, notes.data()) == CUDNN_STATUS_SUCCESS &&
      count >= 0 && count <= static_cast<int64_t>(notes.size())) {
    info.notes_known = true;
    for (int64_t i = 0; i < count; ++i) {
      if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) info.nondeterministic = true;
      absl::StrAppend(&info.notes, info.notes.empty() ? "" : ",", static_cast<int>(notes[i]));
    }
  }
  return info;
}

std::string EngineName(const EngineInfo& info) {
  return absl::StrCat("engine ", info.global_index, " (numerical notes [",
                      info.notes_known ? info.notes : "?", "])");
}

// The finalized execution plan of a graph.
struct ChosenPlan {
  cudnnBackendDescriptor_t plan = nullptr;
  size_t workspace = 0;
  std::string engine;
};

// Builds the tensors and operations of one operation graph, then its execution plan; owns every
// descriptor it creates until TakeDescriptors.
class GraphBuilder {
 public:
  explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}
  ~GraphBuilder() { DestroyInReverse(descs_); }
  GraphBuilder(const GraphBuilder&) = delete;
  GraphBuilder& operator=(const GraphBuilder&) = delete;

  // A finalized tensor descriptor.
  absl::StatusOr<cudnnBackendDescriptor_t> Tensor(absl::string_view name, int64_t uid,
                                                  cudnnDataType_t type, const Dims& dims,
                                                  const Dims& strides, bool is_virtual,
                                                  bool by_value = false) {
    const std::string what = absl::StrCat("tensor '", name, "' (uid ", uid, ")");
    STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t d,
                            Adopt(CreateDesc(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what)));
    const bool virtual_flag = is_virtual;
    const bool by_value_flag = by_value;
    STRAIT_RETURN_IF_ERROR(
        SetAttr(d, what, STRAIT_ATTR(CUDNN_ATTR_TENSOR_DATA_TYPE), CUDNN_TYPE_DATA_TYPE, 1, &type));
    STRAIT_RETURN_IF_ERROR(SetAttr(d, what, STRAIT_ATTR(CUDNN_ATTR_TENSOR_DIMENSIONS),
                                   CUDNN_TYPE_INT64, 4, dims.data()));
    STRAIT_RETURN_IF_ERROR(SetAttr(d, what, STRAIT_ATTR(CUDNN_ATTR_TENSOR_STRIDES),
                                   CUDNN_TYPE_INT64, 4, strides.data()));
    STRAIT_RETURN_IF_ERROR(
        SetAttr(d, what, STRAIT_ATTR(CUDNN_ATTR_TENSOR_UNIQUE_ID), CUDNN_TYPE_INT64, 1, &uid));
    STRAIT_RETURN_IF_ERROR(SetAttr(d, what, STRAIT_ATTR(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT),
                                   CUDNN_TYPE_INT64, 1, &kByteAlignment));
    STRAIT_RETURN_IF_ERROR(SetAttr(d, what, STRAIT_ATTR(CUDNN_ATTR_TENSOR_IS_VIRTUAL),
                                   CUDNN_TYPE_BOOLEAN, 1, &virtual_flag));
    if (by_value_flag) {
      STRAIT_RETURN_IF_ERROR(SetAttr(d, what, STRAIT_ATTR(CUDNN_ATTR_TENSOR_IS_BY_VALUE),
                                     CUDNN_TYPE_BOOLEAN, 1, &by_value_flag));
    }
    STRAIT_RETURN_IF_ERROR(FinalizeDesc(d, what));
    return d;
  }

  // A virtual tensor with the next free uid.
  absl::StatusOr<cudnnBackendDescriptor_t> Virtual(absl::string_view name, cudnnDataType_t type,
                                                   const Dims& dims, const Dims& strides) {
    return Tensor(name, next_virtual_uid_++, type, dims, strides, /*is_virtual=*/true);
  }

  // y = mode(x[, b][, t]). `axis` only for GEN_INDEX.
  absl::Status Pointwise(absl::string_view name, cudnnPointwiseMode_t mode,
                         cudnnDataType_t math_precision, cudnnBackendDescriptor_t x,
                         cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                         cudnnBackendDescriptor_t y, int64_t axis = -1) {
    const std::string what = absl::StrCat("pointwise '", name, "'");
    STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t pw,
                            Adopt(CreateDesc(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what)));
    STRAIT_RETURN_IF_ERROR(SetAttr(pw, what, STRAIT_ATTR(CUDNN_ATTR_POINTWISE_MODE),
                                   CUDNN_TYPE_POINTWISE_MODE, 1, &mode));
    STRAIT_RETURN_IF_ERROR(SetAttr(pw, what, STRAIT_ATTR(CUDNN_ATTR_POINTWISE_MATH_PREC),
                                   CUDNN_TYPE_DATA_TYPE, 1, &math_precision));
    if (mode == CUDNN_POINTWISE_GEN_INDEX) {
      STRAIT_RETURN_IF_ERROR(
          SetAttr(pw, what, STRAIT_ATTR(CUDNN_ATTR_POINTWISE_AXIS), CUDNN_TYPE_INT64, 1, &axis));
    }
    STRAIT_RETURN_IF_ERROR(FinalizeDesc(pw, what));

    STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op,
                            Adopt(CreateDesc(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what)));
    STRAIT_RETURN_IF_ERROR(SetAttr(op, what,
                                   STRAIT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw));
    STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_XDESC),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    if (b != nullptr) {
      STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_BDESC),
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
    }
    if (t != nullptr) {
      STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_TDESC),
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t));
    }
    STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_YDESC),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    STRAIT_RETURN_IF_ERROR(FinalizeDesc(op, what));
    ops_.push_back(op);
    return absl::OkStatus();
  }

  // c = a @ b (batched over the first two dims), fp32 accumulation.
  absl::Status Matmul(absl::string_view name, cudnnBackendDescriptor_t a,
                      cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    const std::string what = absl::StrCat("matmul '", name, "'");
    STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t mm,
                            Adopt(CreateDesc(CUDNN_BACKEND_MATMUL_DESCRIPTOR, what)));
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    STRAIT_RETURN_IF_ERROR(SetAttr(mm, what, STRAIT_ATTR(CUDNN_ATTR_MATMUL_COMP_TYPE),
                                   CUDNN_TYPE_DATA_TYPE, 1, &compute));
    STRAIT_RETURN_IF_ERROR(FinalizeDesc(mm, what));

    STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op,
                            Adopt(CreateDesc(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what)));
    STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_MATMUL_ADESC),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a));
    STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_MATMUL_BDESC),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b));
    STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_MATMUL_CDESC),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c));
    STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_MATMUL_DESC),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm));
    STRAIT_RETURN_IF_ERROR(FinalizeDesc(op, what));
    ops_.push_back(op);
    return absl::OkStatus();
  }

  // y = reduce(x) over the dims where y has extent 1, fp32.
  absl::Status Reduction(absl::string_view name, cudnnReduceTensorOp_t reduce_op,
                         cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    const std::string what = absl::StrCat("reduction '", name, "'");
    STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t red,
                            Adopt(CreateDesc(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what)));
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    STRAIT_RETURN_IF_ERROR(SetAttr(red, what, STRAIT_ATTR(CUDNN_ATTR_REDUCTION_OPERATOR),
                                   CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce_op));
    STRAIT_RETURN_IF_ERROR(SetAttr(red, what, STRAIT_ATTR(CUDNN_ATTR_REDUCTION_COMP_TYPE),
                                   CUDNN_TYPE_DATA_TYPE, 1, &compute));
    STRAIT_RETURN_IF_ERROR(FinalizeDesc(red, what));

    STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op,
                            Adopt(CreateDesc(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what)));
    STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_XDESC),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_YDESC),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_DESC),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &red));
    STRAIT_RETURN_IF_ERROR(FinalizeDesc(op, what));
    ops_.push_back(op);
    return absl::OkStatus();
  }

  // y = x viewed with y's dims and strides (a transpose of the last two dims here).
  absl::Status Reshape(absl::string_view name, cudnnBackendDescriptor_t x,
                       cudnnBackendDescriptor_t y) {
    const std::string what = absl::StrCat("reshape '", name, "'");
    STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op,
                            Adopt(CreateDesc(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what)));
    STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_RESHAPE_XDESC),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x));
    STRAIT_RETURN_IF_ERROR(SetAttr(op, what, STRAIT_ATTR(CUDNN_ATTR_OPERATION_RESHAPE_YDESC),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y));
    STRAIT_RETURN_IF_ERROR(FinalizeDesc(op, what));
    ops_.push_back(op);
    return absl::OkStatus();
  }

  // Finalizes the operation graph of every operation added, asks the heuristics (mode A, then
  // FALLBACK) for engine configs and returns the first that finalizes into an execution plan. With
  // `deterministic_only`, configs whose engine carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC are
  // skipped. The plan (and what it references) stays owned by the builder.
  absl::StatusOr<ChosenPlan> BuildPlan(bool deterministic_only) {
    const std::string what = "operation graph";
    STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t graph,
                            Adopt(CreateDesc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what)));
    STRAIT_RETURN_IF_ERROR(SetAttr(graph, what, STRAIT_ATTR(CUDNN_ATTR_OPERATIONGRAPH_HANDLE),
                                   CUDNN_TYPE_HANDLE, 1, &handle_));
    STRAIT_RETURN_IF_ERROR(SetAttr(graph, what, STRAIT_ATTR(CUDNN_ATTR_OPERATIONGRAPH_OPS),
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
                                   ops_.data()));
    STRAIT_RETURN_IF_ERROR(FinalizeDesc(graph, "operation graph (cuDNN refused the pattern)"));

    std::string failures;
    auto note = [&failures](absl::string_view s) {
      absl::StrAppend(&failures, failures.empty() ? "" : "; ", s);
    };
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      const std::string heur_what =
          absl::StrCat("heuristics mode ", mode == CUDNN_HEUR_MODE_A ? "A" : "FALLBACK");
      absl::StatusOr<Desc> heur = CreateDesc(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, heur_what);
      if (!heur.ok()) return heur.status();
      absl::Status s =
          SetAttr(heur->get(), heur_what, STRAIT_ATTR(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH),
                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
      if (s.ok()) {
        s = SetAttr(heur->get(), heur_what, STRAIT_ATTR(CUDNN_ATTR_ENGINEHEUR_MODE),
                    CUDNN_TYPE_HEUR_MODE, 1, &mode);
      }
      if (s.ok()) s = FinalizeDesc(heur->get(), heur_what);
      int64_t count = 0;
      if (s.ok()) {
        s = Annotate(STRAIT_CUDNN_CHECK(cudnnBackendGetAttribute(
                         heur->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                         0, &count, nullptr)),
                     absl::StrCat(heur_what, ": count results"));
      }
      if (!s.ok()) {
        note(s.message());
        continue;
      }
      if (count <= 0) {
        note(absl::StrCat(heur_what, ": no engine configs"));
        continue;
      }
      count = std::min(count, kMaxEngineConfigs);
      std::vector<Desc> cfgs;
      std::vector<cudnnBackendDescriptor_t> raw_cfgs;
      for (int64_t i = 0; i < count; ++i) {
        STRAIT_ASSIGN_OR_RETURN(Desc cfg, CreateDesc(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                                     absl::StrCat(heur_what, ": engine config")));
        raw_cfgs.push_back(cfg.get());
        cfgs.push_back(std::move(cfg));
      }
      int64_t returned = 0;
      s = Annotate(STRAIT_CUDNN_CHECK(cudnnBackendGetAttribute(
                       heur->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                       count, &returned, raw_cfgs.data())),
                   absl::StrCat(heur_what, ": get results"));
      if (!s.ok()) {
        note(s.message());
        continue;
      }
      returned = std::min(returned, count);
      for (int64_t i = 0; i < returned; ++i) {
        const EngineInfo info = DescribeEngine(cfgs[i].get());
        const std::string engine = EngineName(info);
        const std::string plan_what = absl::StrCat(heur_what, " config ", i, " ", engine);
        if (deterministic_only && info.nondeterministic) {
          note(absl::StrCat(plan_what, ": skipped, nondeterministic"));
          continue;
        }
        absl::StatusOr<Desc> plan = CreateDesc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan_what);
        if (!plan.ok()) return plan.status();
        cudnnBackendDescriptor_t cfg = cfgs[i].get();
        s = SetAttr(plan->get(), plan_what, STRAIT_ATTR(CUDNN_ATTR_EXECUTION_PLAN_HANDLE),
                    CUDNN_TYPE_HANDLE, 1, &handle_);
        if (s.ok()) {
          s = SetAttr(plan->get(), plan_what, STRAIT_ATTR(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG),
                      CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
        }
        // The first finalize of a runtime-compiled engine compiles its kernels (can take seconds).
        if (s.ok()) s = FinalizeDesc(plan->get(), plan_what);
        int64_t workspace = 0;
        int64_t got = 0;
        if (s.ok()) {
          s = Annotate(STRAIT_CUDNN_CHECK(cudnnBackendGetAttribute(
                           plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                           1, &got, &workspace)),
                       absl::StrCat(plan_what, ": workspace size"));
        }
        if (s.ok() && (got != 1 || workspace < 0)) {
          s = absl::InternalError(absl::StrCat(plan_what, ": bad workspace size ", workspace));
        }
        if (!s.ok()) {
          note(s.message());
          continue;
        }
        ChosenPlan chosen;
        chosen.plan = plan->get();
        chosen.workspace = static_cast<size_t>(workspace);
        chosen.engine = absl::StrCat(heur_what, " config ", i, ", ", engine);
        // Kept alive in creation order: the heuristics, the config, the plan.
        descs_.push_back(std::move(*heur));
        descs_.push_back(std::move(cfgs[i]));
        descs_.push_back(std::move(*plan));
        return chosen;
      }
    }
    return absl::UnimplementedError(absl::StrCat("no engine finalized: ", failures));
  }

  std::vector<Desc> TakeDescriptors() { return std::exchange(descs_, {}); }

 private:
  // Keeps `d` until the builder (or whoever takes the descriptors) goes; returns its handle.
  absl::StatusOr<cudnnBackendDescriptor_t> Adopt(absl::StatusOr<Desc> d) {
    if (!d.ok()) return d.status();
    descs_.push_back(std::move(*d));
    return descs_.back().get();
  }

  cudnnHandle_t handle_;
  std::vector<Desc> descs_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_uid_ = kFirstVirtualUid;
};

// The strides of the tensors of one shape, as [n, heads, rows, cols] 4-D tensors.
struct Layout {
  int64_t n, h, t, d;
  Dims qkv_dims, qkv_strides;        // Q, K, V, dQ, dK, dV: [n, h, t, d] views of the qkv rows
  Dims qkv_t_dims, qkv_t_strides;    // K^T, V^T: [n, h, d, t]
  Dims o_dims, o_strides;            // O, dO: [n, h, t, d] views of the out rows
  Dims scores_dims, scores_strides;  // [n, h, t, t] packed
  Dims scores_t_strides;             // the same dims, transposed strides (P^T, dS^T)
  Dims rows_dims, rows_strides;      // [n, h, t, 1] packed (stats, row max, row sums)
  Dims scalar_dims, scalar_strides;  // [1, 1, 1, 1]
};

Layout MakeLayout(const CudnnAttentionShape& s) {
  Layout l;
  l.n = s.n;
  l.h = s.heads;
  l.t = s.tokens;
  l.d = s.dh;
  const int64_t qkv_row = 3 * l.h * l.d;  // elements per token in qkv
  const int64_t o_row = l.h * l.d;        // elements per token in out
  l.qkv_dims = {l.n, l.h, l.t, l.d};
  l.qkv_strides = {l.t * qkv_row, l.d, qkv_row, 1};
  l.qkv_t_dims = {l.n, l.h, l.d, l.t};
  l.qkv_t_strides = {l.t * qkv_row, l.d, 1, qkv_row};
  l.o_dims = {l.n, l.h, l.t, l.d};
  l.o_strides = {l.t * o_row, l.d, o_row, 1};
  l.scores_dims = {l.n, l.h, l.t, l.t};
  l.scores_strides = {l.h * l.t * l.t, l.t * l.t, l.t, 1};
  l.scores_t_strides = {l.h * l.t * l.t, l.t * l.t, 1, l.t};
  l.rows_dims = {l.n, l.h, l.t, 1};
  l.rows_strides = {l.h * l.t, l.t, 1, 1};
  l.scalar_dims = {1, 1, 1, 1};
  l.scalar_strides = {1, 1, 1, 1};
  return l;
}

// The top-left causal mask of cudnn-frontend's CompositeDiagonalBandMaskNode with right bound 0:
// keep score (row, col) where row >= col, else the pass-by-value mask value (-inf).
absl::StatusOr<cudnnBackendDescriptor_t> CausalMask(GraphBuilder& g, const Layout& l,
                                                    cudnnBackendDescriptor_t scores) {
  STRAIT_ASSIGN_OR_RETURN(auto mask_value,
                          g.Tensor("mask value", kUidMaskValue, CUDNN_DATA_FLOAT, l.scalar_dims,
                                   l.scalar_strides, /*is_virtual=*/false, /*by_value=*/true));
  STRAIT_ASSIGN_OR_RETURN(
      auto row, g.Virtual("row index", CUDNN_DATA_INT32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(g.Pointwise("row index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT,
                                     scores, nullptr, nullptr, row, /*axis=*/2));
  STRAIT_ASSIGN_OR_RETURN(
      auto col, g.Virtual("col index", CUDNN_DATA_INT32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(g.Pointwise("col index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT,
                                     scores, nullptr, nullptr, col, /*axis=*/3));
  STRAIT_ASSIGN_OR_RETURN(
      auto keep, g.Virtual("row >= col", CUDNN_DATA_BOOLEAN, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(g.Pointwise("row >= col", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row,
                                     col, nullptr, keep));
  STRAIT_ASSIGN_OR_RETURN(
      auto masked, g.Virtual("masked scores", CUDNN_DATA_FLOAT, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(g.Pointwise("causal select", CUDNN_POINTWISE_BINARY_SELECT,
                                     CUDNN_DATA_FLOAT, scores, mask_value, keep, masked));
  return masked;
}

// O = softmax(scale * Q K^T [masked]) V and Stats = max + log(sum exp(. - max)), as
// CompositeSDPANode + CompositeSoftmaxNode (with stats) lower it.
absl::Status BuildForwardGraph(GraphBuilder& g, const CudnnAttentionShape& s) {
  const Layout l = MakeLayout(s);
  constexpr cudnnDataType_t kBf16 = CUDNN_DATA_BFLOAT16;
  constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;
  STRAIT_ASSIGN_OR_RETURN(auto q, g.Tensor("Q", kUidQ, kBf16, l.qkv_dims, l.qkv_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto kt,
                          g.Tensor("K^T", kUidK, kBf16, l.qkv_t_dims, l.qkv_t_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto v, g.Tensor("V", kUidV, kBf16, l.qkv_dims, l.qkv_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto o, g.Tensor("O", kUidO, kBf16, l.o_dims, l.o_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto stats,
                          g.Tensor("Stats", kUidStats, kF32, l.rows_dims, l.rows_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto scale, g.Tensor("attn scale", kUidScale, kF32, l.scalar_dims,
                                               l.scalar_strides, false, /*by_value=*/true));

  STRAIT_ASSIGN_OR_RETURN(auto qk, g.Virtual("Q K^T", kF32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(g.Matmul("bmm1 Q K^T", q, kt, qk));
  STRAIT_ASSIGN_OR_RETURN(auto scores, g.Virtual("scores", kF32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(
      g.Pointwise("attn scale", CUDNN_POINTWISE_MUL, kF32, qk, scale, nullptr, scores));
  if (s.causal) {
    STRAIT_ASSIGN_OR_RETURN(scores, CausalMask(g, l, scores));
  }

  STRAIT_ASSIGN_OR_RETURN(auto row_max, g.Virtual("row max", kF32, l.rows_dims, l.rows_strides));
  STRAIT_RETURN_IF_ERROR(g.Reduction("softmax max", CUDNN_REDUCE_TENSOR_MAX, scores, row_max));
  STRAIT_ASSIGN_OR_RETURN(auto centered,
                          g.Virtual("scores - max", kF32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(
      g.Pointwise("softmax sub", CUDNN_POINTWISE_SUB, kF32, scores, row_max, nullptr, centered));
  STRAIT_ASSIGN_OR_RETURN(auto e, g.Virtual("exp", kF32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(
      g.Pointwise("softmax exp", CUDNN_POINTWISE_EXP, kF32, centered, nullptr, nullptr, e));
  STRAIT_ASSIGN_OR_RETURN(auto row_sum, g.Virtual("row sum", kF32, l.rows_dims, l.rows_strides));
  STRAIT_RETURN_IF_ERROR(g.Reduction("softmax sum", CUDNN_REDUCE_TENSOR_ADD, e, row_sum));
  STRAIT_ASSIGN_OR_RETURN(auto log_sum,
                          g.Virtual("log row sum", kF32, l.rows_dims, l.rows_strides));
  STRAIT_RETURN_IF_ERROR(
      g.Pointwise("softmax log", CUDNN_POINTWISE_LOG, kF32, row_sum, nullptr, nullptr, log_sum));
  STRAIT_RETURN_IF_ERROR(
      g.Pointwise("stats", CUDNN_POINTWISE_ADD, kF32, row_max, log_sum, nullptr, stats));
  // The probabilities feed bmm2 in the io type.
  STRAIT_ASSIGN_OR_RETURN(auto p, g.Virtual("P", kBf16, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(
      g.Pointwise("softmax div", CUDNN_POINTWISE_DIV, kF32, e, row_sum, nullptr, p));
  STRAIT_RETURN_IF_ERROR(g.Matmul("bmm2 P V", p, v, o));
  return absl::OkStatus();
}

// dQ, dK, dV from Q, K, V, O, dO and Stats, as CompositeSDPABackwardNode lowers it (MHA, no
// dropout, no bias). `deterministic`: dQ straight from the dS K matmul (the frontend's
// use_dp_workspace variant, which it picks on Hopper for set_deterministic_algorithm(true));
// otherwise into the fp32 accumulator dQ_accum, then an identity to dQ.
absl::Status BuildBackwardGraph(GraphBuilder& g, const CudnnAttentionShape& s, bool deterministic) {
  const Layout l = MakeLayout(s);
  constexpr cudnnDataType_t kBf16 = CUDNN_DATA_BFLOAT16;
  constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;
  STRAIT_ASSIGN_OR_RETURN(auto q, g.Tensor("Q", kUidQ, kBf16, l.qkv_dims, l.qkv_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto kt,
                          g.Tensor("K^T", kUidK, kBf16, l.qkv_t_dims, l.qkv_t_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto vt,
                          g.Tensor("V^T", kUidV, kBf16, l.qkv_t_dims, l.qkv_t_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto o, g.Tensor("O", kUidO, kBf16, l.o_dims, l.o_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto d_o, g.Tensor("dO", kUidDO, kBf16, l.o_dims, l.o_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto stats,
                          g.Tensor("Stats", kUidStats, kF32, l.rows_dims, l.rows_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto scale, g.Tensor("attn scale", kUidScale, kF32, l.scalar_dims,
                                               l.scalar_strides, false, /*by_value=*/true));
  STRAIT_ASSIGN_OR_RETURN(auto one, g.Tensor("one", kUidOne, kF32, l.scalar_dims, l.scalar_strides,
                                             false, /*by_value=*/true));
  STRAIT_ASSIGN_OR_RETURN(auto dq, g.Tensor("dQ", kUidDQ, kBf16, l.qkv_dims, l.qkv_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto dk, g.Tensor("dK", kUidDK, kBf16, l.qkv_dims, l.qkv_strides, false));
  STRAIT_ASSIGN_OR_RETURN(auto dv, g.Tensor("dV", kUidDV, kBf16, l.qkv_dims, l.qkv_strides, false));

  // softmax_sum = rowsum(dO * O) * 1 (the 1 is the frontend's dropout-scale-inverse slot), kept in
  // the caller's workspace. The strides of the dO*O intermediate are the frontend's, verbatim.
  const Dims do_o_strides = {l.h * l.t * l.d, l.t * l.d, l.h * l.d, 1};
  STRAIT_ASSIGN_OR_RETURN(auto do_o, g.Virtual("dO * O", kF32, l.o_dims, do_o_strides));
  STRAIT_RETURN_IF_ERROR(g.Pointwise("mul dO O", CUDNN_POINTWISE_MUL, kF32, d_o, o, nullptr, do_o));
  STRAIT_ASSIGN_OR_RETURN(auto do_o_sum,
                          g.Virtual("rowsum(dO * O)", kF32, l.rows_dims, l.rows_strides));
  STRAIT_RETURN_IF_ERROR(g.Reduction("reduce dO O", CUDNN_REDUCE_TENSOR_ADD, do_o, do_o_sum));
  STRAIT_ASSIGN_OR_RETURN(auto softmax_sum, g.Tensor("softmax_sum", kUidSoftmaxSum, kF32,
                                                     l.rows_dims, l.rows_strides, false));
  STRAIT_RETURN_IF_ERROR(g.Pointwise("scale dropout inv", CUDNN_POINTWISE_MUL, kF32, do_o_sum, one,
                                     nullptr, softmax_sum));

  // P = exp(scale * Q K^T [masked] - Stats).
  STRAIT_ASSIGN_OR_RETURN(auto qk, g.Virtual("Q K^T", kF32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(g.Matmul("matmul Q K^T", q, kt, qk));
  STRAIT_ASSIGN_OR_RETURN(auto scores, g.Virtual("scores", kF32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(
      g.Pointwise("mul s attn scale", CUDNN_POINTWISE_MUL, kF32, qk, scale, nullptr, scores));
  STRAIT_ASSIGN_OR_RETURN(auto centered,
                          g.Virtual("scores - stats", kF32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(
      g.Pointwise("sub s m", CUDNN_POINTWISE_SUB, kF32, scores, stats, nullptr, centered));
  if (s.causal) {
    STRAIT_ASSIGN_OR_RETURN(centered, CausalMask(g, l, centered));
  }
  STRAIT_ASSIGN_OR_RETURN(auto p, g.Virtual("P", kF32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(
      g.Pointwise("exp s", CUDNN_POINTWISE_EXP, kF32, centered, nullptr, nullptr, p));

  // dV = P^T dO.
  STRAIT_ASSIGN_OR_RETURN(auto p_t, g.Virtual("P^T", kBf16, l.scores_dims, l.scores_t_strides));
  STRAIT_RETURN_IF_ERROR(g.Reshape("reshape p", p, p_t));
  STRAIT_RETURN_IF_ERROR(g.Matmul("matmul pT dO", p_t, d_o, dv));

  // dS = P * (dO V^T - softmax_sum) * scale.
  STRAIT_ASSIGN_OR_RETURN(auto dp, g.Virtual("dP", kF32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(g.Matmul("matmul dO VT", d_o, vt, dp));
  STRAIT_ASSIGN_OR_RETURN(auto dp_centered,
                          g.Virtual("dP - softmax_sum", kF32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(g.Pointwise("sub dP softmax sum", CUDNN_POINTWISE_SUB, kF32, dp,
                                     softmax_sum, nullptr, dp_centered));
  STRAIT_ASSIGN_OR_RETURN(auto dp_p, g.Virtual("dP * P", kF32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(
      g.Pointwise("mul dP exp s", CUDNN_POINTWISE_MUL, kF32, dp_centered, p, nullptr, dp_p));
  STRAIT_ASSIGN_OR_RETURN(auto ds, g.Virtual("dS", kF32, l.scores_dims, l.scores_strides));
  STRAIT_RETURN_IF_ERROR(
      g.Pointwise("mul dS attn scale", CUDNN_POINTWISE_MUL, kF32, dp_p, scale, nullptr, ds));

  // dK = dS^T Q.
  STRAIT_ASSIGN_OR_RETURN(auto ds_t, g.Virtual("dS^T", kBf16, l.scores_dims, l.scores_t_strides));
  STRAIT_RETURN_IF_ERROR(g.Reshape("reshape dS", ds, ds_t));
  STRAIT_RETURN_IF_ERROR(g.Matmul("matmul dST Q", ds_t, q, dk));

  // dQ = dS K, K as a reshape of the K^T input back to [n, h, t, d] (virtual: fp32 by the
  // frontend's rule, as there).
  STRAIT_ASSIGN_OR_RETURN(auto k, g.Virtual("K", kF32, l.qkv_dims, l.qkv_strides));
  STRAIT_RETURN_IF_ERROR(g.Reshape("reshape k", kt, k));
  if (deterministic) {
    STRAIT_RETURN_IF_ERROR(g.Matmul("matmul dS K", ds, k, dq));
  } else {
    const Dims accum_strides = {l.h * l.t * l.d, l.t * l.d, l.d, 1};
    STRAIT_ASSIGN_OR_RETURN(
        auto dq_accum, g.Tensor("dQ_accum", kUidDQAccum, kF32, l.qkv_dims, accum_strides, false));
    STRAIT_RETURN_IF_ERROR(g.Matmul("matmul dS K", ds, k, dq_accum));
    STRAIT_RETURN_IF_ERROR(
        g.Pointwise("identity dQ", CUDNN_POINTWISE_IDENTITY, kF32, dq_accum, nullptr, nullptr, dq));
  }
  return absl::OkStatus();
}

std::string DescribeShape(const CudnnAttentionShape& s, bool forward) {
  return absl::StrCat("cuDNN SDPA ", forward ? "forward" : "backward", " n=", s.n,
                      " tokens=", s.tokens, " heads=", s.heads, " dh=", s.dh,
                      s.causal ? " causal" : " non-causal");
}

absl::Status ValidateShape(const CudnnAttentionShape& s, bool forward) {
  if (s.n <= 0 || s.tokens <= 0 || s.heads <= 0 || s.dh <= 0) {
    return absl::InvalidArgumentError("every dimension must be positive");
  }
  if (s.dh % 8 != 0 || s.dh > 256) {
    return absl::InvalidArgumentError("dh must be a multiple of 8, at most 256");
  }
  if (!std::isfinite(s.scale)) return absl::InvalidArgumentError("the scale must be finite");
  if (!forward && s.tokens < 2) {
    // cudnn-frontend refuses s_q = s_kv = 1 for the backward ("s_q = s_kv = 1 is not supported").
    return absl::InvalidArgumentError("the backward needs at least 2 tokens");
  }
  // The largest extent any tensor here spans: n*h*t*t scores (virtual) and n*t*3*h*d elements.
  const double scores = static_cast<double>(s.n) * s.heads * s.tokens * s.tokens;
  const double qkv = static_cast<double>(s.n) * s.tokens * 3.0 * s.heads * s.dh;
  if (scores > 9e18 || qkv * 4 > 9e18) return absl::InvalidArgumentError("the shape is too large");
  return absl::OkStatus();
}

absl::Status CheckPointer(const void* p, const char* name) {
  if (p == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, " is null"));
  if (reinterpret_cast<uintptr_t>(p) % kByteAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, " is not 16-byte aligned"));
  }
  return absl::OkStatus();
}

bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + b_bytes && y < x + a_bytes;
}

// Runs `plan` on the handle's stream with the given tensors and workspace.
absl::Status Execute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                     const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
                     void* workspace) {
  const std::string what = "variant pack";
  STRAIT_ASSIGN_OR_RETURN(Desc pack, CreateDesc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what));
  STRAIT_RETURN_IF_ERROR(SetAttr(pack.get(), what, STRAIT_ATTR(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS),
                                 CUDNN_TYPE_INT64, static_cast<int64_t>(uids.size()), uids.data()));
  STRAIT_RETURN_IF_ERROR(
      SetAttr(pack.get(), what, STRAIT_ATTR(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS),
              CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(pointers.size()), pointers.data()));
  STRAIT_RETURN_IF_ERROR(SetAttr(pack.get(), what, STRAIT_ATTR(CUDNN_ATTR_VARIANT_PACK_WORKSPACE),
                                 CUDNN_TYPE_VOID_PTR, 1, &workspace));
  STRAIT_RETURN_IF_ERROR(FinalizeDesc(pack.get(), what));
  return Annotate(STRAIT_CUDNN_CHECK(cudnnBackendExecute(handle, plan, pack.get())), "execute");
}

}  // namespace cudnn_attention_internal

using namespace cudnn_attention_internal;  // NOLINT: this file's own internals

struct CudnnAttention::Plan {
  absl::Status status;      // not OK: why no plan could be built (cached, not retried)
  std::vector<Desc> descs;  // everything `plan` references
  cudnnBackendDescriptor_t plan = nullptr;
  size_t cudnn_workspace = 0;  // at the start of workspace_
  // Backward only: the scratch tensors after cuDNN's workspace (offsets into workspace_).
  size_t softmax_sum_offset = 0;
  size_t dq_accum_offset = 0;
  size_t dq_accum_bytes = 0;  // 0: the deterministic graph, no accumulator
  size_t total_workspace = 0;
  bool deterministic = false;
  std::string engine;

  ~Plan() { DestroyInReverse(descs); }
};

CudnnAttention::CudnnAttention(cudnnContext* handle, cudaStream_t stream, bool deterministic,
                               bool verbose, float mask_value)
    : handle_(handle),
      stream_(stream),
      deterministic_(deterministic),
      verbose_(verbose),
      mask_value_(mask_value) {}

absl::StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(cudaStream_t stream) {
  int device = 0;
  if (absl::Status s = STRAIT_CUDA_CHECK(cudaGetDevice(&device)); !s.ok()) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("CudnnAttention: no usable CUDA device: ", s.message()));
  }
  int major = 0;
  int minor = 0;
  absl::Status s =
      STRAIT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (s.ok()) {
    s = STRAIT_CUDA_CHECK(
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  }
  if (!s.ok()) {
    cudaGetLastError();
    return absl::FailedPreconditionError(
        absl::StrCat("CudnnAttention: cannot query CUDA device ", device, ": ", s.message()));
  }
  if (major < 8) {
    return absl::FailedPreconditionError(
        absl::StrCat("CudnnAttention: device ", device, " is sm_", major, minor,
                     "; cuDNN's fused attention needs sm_80 or newer"));
  }
  const size_t version = cudnnGetVersion();
  if (version < 90000) {
    return absl::FailedPreconditionError(
        absl::StrCat("CudnnAttention: cuDNN ", version,
                     " is loaded; this code needs cuDNN 9 (built against ", CUDNN_VERSION, ")"));
  }
  cudnnHandle_t handle = nullptr;
  s = STRAIT_CUDNN_CHECK(cudnnCreate(&handle));
  if (!s.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("CudnnAttention: cuDNN could not be initialized: ", s.message()));
  }
  s = STRAIT_CUDNN_CHECK(cudnnSetStream(handle, stream));
  if (!s.ok()) {
    cudnnDestroy(handle);
    return absl::InternalError(absl::StrCat("CudnnAttention: ", s.message()));
  }
  const char* det = std::getenv("STRAIT_CUDNN_ATTENTION_DETERMINISTIC");
  const bool deterministic = det == nullptr || std::strcmp(det, "0") != 0;
  const char* verb = std::getenv("STRAIT_CUDNN_ATTENTION_VERBOSE");
  const bool verbose = verb != nullptr && std::strcmp(verb, "0") != 0 && verb[0] != '\0';
  // cudnn-frontend's get_negative_inf_value(): the lowest float before 9.10, -inf since.
  const float mask_value = version < 91000 ? std::numeric_limits<float>::lowest()
                                           : -std::numeric_limits<float>::infinity();
  if (verbose) {
    std::fprintf(stderr,
                 "[strait cudnn attention] cuDNN %zu (built against %d), sm_%d%d, deterministic "
                 "backward %s\n",
                 version, CUDNN_VERSION, major, minor, deterministic ? "preferred" : "off");
  }
  return std::unique_ptr<CudnnAttention>(
      new CudnnAttention(handle, stream, deterministic, verbose, mask_value));
}

CudnnAttention::~CudnnAttention() {
  plans_.clear();  // the plans reference the handle
  if (workspace_ != nullptr) {
    cudaStreamSynchronize(stream_);
    cudaFree(workspace_);
  }
  if (handle_ != nullptr) cudnnDestroy(handle_);
}

absl::StatusOr<CudnnAttention::Plan*> CudnnAttention::GetPlan(const CudnnAttentionShape& s,
                                                              Pass pass) {
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &s.scale, sizeof(scale_bits));
  const PlanKey key{s.n, s.tokens, s.heads, s.dh, scale_bits, s.causal, static_cast<int>(pass)};
  auto it = plans_.find(key);
  if (it != plans_.end()) {
    if (!it->second->status.ok()) return it->second->status;
    return it->second.get();
  }

  const bool forward = pass == Pass::kForward;
  auto plan = std::make_unique<Plan>();
  // Builds one graph into a plan; on success moves everything into `plan`.
  auto build = [&](bool deterministic) -> absl::Status {
    GraphBuilder g(handle_);
    absl::Status st = forward ? BuildForwardGraph(g, s) : BuildBackwardGraph(g, s, deterministic);
    if (!st.ok()) return Annotate(st, "building the graph");
    absl::StatusOr<ChosenPlan> chosen = g.BuildPlan(/*deterministic_only=*/deterministic);
    if (!chosen.ok()) return chosen.status();
    size_t total = RoundUp(chosen->workspace, kScratchAlignment);
    size_t softmax_sum_offset = 0;
    size_t dq_accum_offset = 0;
    size_t dq_accum_bytes = 0;
    if (!forward) {
      const size_t rows = static_cast<size_t>(s.n) * s.heads * s.tokens;
      softmax_sum_offset = total;
      total += RoundUp(rows * sizeof(float), kScratchAlignment);
      if (!deterministic) {
        dq_accum_offset = total;
        dq_accum_bytes = rows * s.dh * sizeof(float);
        total += RoundUp(dq_accum_bytes, kScratchAlignment);
      }
    }
    if (deterministic && total > kMaxDeterministicWorkspaceBytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(chosen->engine, " needs ", total, " bytes of workspace, over the ",
                       kMaxDeterministicWorkspaceBytes, " allowed for the deterministic graph"));
    }
    plan->descs = g.TakeDescriptors();
    plan->plan = chosen->plan;
    plan->cudnn_workspace = chosen->workspace;
    plan->softmax_sum_offset = softmax_sum_offset;
    plan->dq_accum_offset = dq_accum_offset;
    plan->dq_accum_bytes = dq_accum_bytes;
    plan->total_workspace = total;
    plan->deterministic = forward || deterministic;
    plan->engine = chosen->engine;
    return absl::OkStatus();
  };

  absl::Status st;
  if (forward) {
    st = build(false);
  } else {
    std::string deterministic_failure;
    if (deterministic_) {
      st = build(true);
      if (!st.ok()) deterministic_failure = std::string(st.message());
    }
    if (!deterministic_ || !st.ok()) {
      st = build(false);
      if (!st.ok() && !deterministic_failure.empty()) {
        st = absl::Status(st.code(), absl::StrCat("deterministic graph: ", deterministic_failure,
                                                  "; fp32-accumulator graph: ", st.message()));
      } else if (st.ok() && verbose_ && !deterministic_failure.empty()) {
        std::fprintf(stderr, "[strait cudnn attention] %s: no deterministic plan (%s)\n",
                     DescribeShape(s, forward).c_str(), deterministic_failure.c_str());
      }
    }
  }
  if (!st.ok()) {
    plan->status = Annotate(st, DescribeShape(s, forward));
    DestroyInReverse(plan->descs);
  } else if (verbose_) {
    std::fprintf(stderr,
                 "[strait cudnn attention] %s: %s, cuDNN workspace %zu bytes, total %zu bytes, "
                 "%s\n",
                 DescribeShape(s, forward).c_str(), plan->engine.c_str(), plan->cudnn_workspace,
                 plan->total_workspace,
                 plan->deterministic ? "deterministic graph" : "fp32 dQ accumulator graph");
  }
  Plan* raw = plan.get();
  plans_.emplace(key, std::move(plan));
  if (!raw->status.ok()) return raw->status;
  return raw;
}

absl::Status CudnnAttention::EnsureWorkspace(size_t bytes) {
  if (bytes <= workspace_bytes_) return absl::OkStatus();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture)));
  if (capture != cudaStreamCaptureStatusNone) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the workspace must grow to ", bytes,
        " bytes while the stream is being captured; run this shape once before capturing"));
  }
  STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaStreamSynchronize(stream_)));
  if (workspace_ != nullptr) {
    void* old = std::exchange(workspace_, nullptr);
    workspace_bytes_ = 0;
    STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaFree(old)));
  }
  void* p = nullptr;
  if (absl::Status s = STRAIT_CUDA_CHECK(cudaMalloc(&p, bytes)); !s.ok()) {
    cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("allocating ", bytes, " bytes of workspace: ", s.message()));
  }
  workspace_ = p;
  workspace_bytes_ = bytes;
  return absl::OkStatus();
}

bool CudnnAttention::Supports(const CudnnAttentionShape& s) {
  if (!ValidateShape(s, /*forward=*/true).ok() || !ValidateShape(s, /*forward=*/false).ok()) {
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  return GetPlan(s, Pass::kForward).ok() && GetPlan(s, Pass::kBackward).ok();
}

absl::Status CudnnAttention::Forward(const CudnnAttentionShape& s, const void* qkv, void* out,
                                     float* lse) {
  const std::string context = DescribeShape(s, /*forward=*/true);
  STRAIT_RETURN_IF_ERROR(Annotate(ValidateShape(s, /*forward=*/true), context));
  STRAIT_RETURN_IF_ERROR(Annotate(CheckPointer(qkv, "qkv"), context));
  STRAIT_RETURN_IF_ERROR(Annotate(CheckPointer(out, "out"), context));
  STRAIT_RETURN_IF_ERROR(Annotate(CheckPointer(lse, "lse"), context));
  const size_t rows = static_cast<size_t>(s.n) * s.tokens;
  const size_t hd = static_cast<size_t>(s.heads) * s.dh;
  const size_t qkv_bytes = rows * 3 * hd * 2;
  const size_t out_bytes = rows * hd * 2;
  const size_t lse_bytes = rows * s.heads * sizeof(float);
  if (Overlap(out, out_bytes, qkv, qkv_bytes) || Overlap(lse, lse_bytes, qkv, qkv_bytes) ||
      Overlap(lse, lse_bytes, out, out_bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": qkv, out and lse overlap"));
  }

  std::lock_guard<std::mutex> lock(mu_);
  STRAIT_ASSIGN_OR_RETURN(Plan * plan, GetPlan(s, Pass::kForward));
  STRAIT_RETURN_IF_ERROR(Annotate(EnsureWorkspace(plan->total_workspace), context));
  char* base = static_cast<char*>(const_cast<void*>(qkv));
  float scale = s.scale;
  std::vector<int64_t> uids = {kUidQ, kUidK, kUidV, kUidO, kUidStats, kUidScale};
  std::vector<void*> pointers = {base, base + hd * 2, base + 2 * hd * 2, out, lse, &scale};
  if (s.causal) {
    uids.push_back(kUidMaskValue);
    pointers.push_back(&mask_value_);
  }
  return Annotate(Execute(handle_, plan->plan, uids, pointers, workspace_),
                  absl::StrCat(context, " (", plan->engine, ")"));
}

absl::Status CudnnAttention::Backward(const CudnnAttentionShape& s, const void* qkv,
                                      const void* out, const float* lse, const void* dout,
                                      void* dqkv) {
  const std::string context = DescribeShape(s, /*forward=*/false);
  STRAIT_RETURN_IF_ERROR(Annotate(ValidateShape(s, /*forward=*/false), context));
  STRAIT_RETURN_IF_ERROR(Annotate(CheckPointer(qkv, "qkv"), context));
  STRAIT_RETURN_IF_ERROR(Annotate(CheckPointer(out, "out"), context));
  STRAIT_RETURN_IF_ERROR(Annotate(CheckPointer(lse, "lse"), context));
  STRAIT_RETURN_IF_ERROR(Annotate(CheckPointer(dout, "dout"), context));
  STRAIT_RETURN_IF_ERROR(Annotate(CheckPointer(dqkv, "dqkv"), context));
  const size_t rows = static_cast<size_t>(s.n) * s.tokens;
  const size_t hd = static_cast<size_t>(s.heads) * s.dh;
  const size_t qkv_bytes = rows * 3 * hd * 2;
  const size_t out_bytes = rows * hd * 2;
  const size_t lse_bytes = rows * s.heads * sizeof(float);
  if (Overlap(dqkv, qkv_bytes, qkv, qkv_bytes) || Overlap(dqkv, qkv_bytes, out, out_bytes) ||
      Overlap(dqkv, qkv_bytes, dout, out_bytes) || Overlap(dqkv, qkv_bytes, lse, lse_bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, ": dqkv overlaps one of qkv, out, lse, dout"));
  }

  std::lock_guard<std::mutex> lock(mu_);
  STRAIT_ASSIGN_OR_RETURN(Plan * plan, GetPlan(s, Pass::kBackward));
  STRAIT_RETURN_IF_ERROR(Annotate(EnsureWorkspace(plan->total_workspace), context));
  char* ws = static_cast<char*>(workspace_);
  if (plan->dq_accum_bytes > 0) {
    STRAIT_RETURN_IF_ERROR(
        Annotate(STRAIT_CUDA_CHECK(
                     cudaMemsetAsync(ws + plan->dq_accum_offset, 0, plan->dq_accum_bytes, stream_)),
                 absl::StrCat(context, ": zeroing dQ_accum")));
  }
  char* in = static_cast<char*>(const_cast<void*>(qkv));
  char* grad = static_cast<char*>(dqkv);
  float scale = s.scale;
  float one = 1.0f;
  std::vector<int64_t> uids = {kUidQ,  kUidK,  kUidV,  kUidO,     kUidDO,  kUidStats,
                               kUidDQ, kUidDK, kUidDV, kUidScale, kUidOne, kUidSoftmaxSum};
  std::vector<void*> pointers = {in,
                                 in + hd * 2,
                                 in + 2 * hd * 2,
                                 const_cast<void*>(out),
                                 const_cast<void*>(dout),
                                 const_cast<float*>(lse),
                                 grad,
                                 grad + hd * 2,
                                 grad + 2 * hd * 2,
                                 &scale,
                                 &one,
                                 ws + plan->softmax_sum_offset};
  if (plan->dq_accum_bytes > 0) {
    uids.push_back(kUidDQAccum);
    pointers.push_back(ws + plan->dq_accum_offset);
  }
  if (s.causal) {
    uids.push_back(kUidMaskValue);
    pointers.push_back(&mask_value_);
  }
  return Annotate(Execute(handle_, plan->plan, uids, pointers, workspace_),
                  absl::StrCat(context, " (", plan->engine, ")"));
}

}  // namespace strait::site

#undef STRAIT_ATTR
