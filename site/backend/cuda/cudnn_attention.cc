// CudnnAttention (cudnn_attention.h): a plan per shape and pass, built from the graphs of
// cudnn_attention_graphs.h through the cuDNN layer of cudnn_graph.h and cached, the workspace
// (cuDNN's own, then the backward's softmax_sum and fp32 dQ accumulator), and the executions.
#include "site/backend/cuda/cudnn_attention.h"

#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/library_check.h"
#include "core/status.h"
#include "site/backend/cuda/cudnn_attention_graphs.h"
#include "site/backend/cuda/cudnn_graph.h"

namespace strait::site {
using namespace cudnn_attention_internal;  // NOLINT(build/namespaces): this class's own internals
namespace {

constexpr size_t kScratchAlignment = 256;
// Above this the deterministic backward's workspace (about n*heads*tokens^2*2 bytes) is not worth
// it: the fp32-accumulator graph is used instead.
constexpr size_t kMaxDeterministicWorkspaceBytes = size_t{2} << 30;

size_t RoundUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

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

// One graph built into a plan, and where the plan's scratch tensors go in the workspace.
struct BuiltPlan {
  std::vector<Desc> descs;  // everything chosen.plan references
  ChosenPlan chosen;
  size_t softmax_sum_offset = 0;
  size_t dq_accum_offset = 0;
  size_t dq_accum_bytes = 0;
  size_t total = 0;
};

// Builds the forward graph, or the backward one (`deterministic`: the dP-workspace variant), and
// its plan. ResourceExhausted: the deterministic plan's workspace is over the limit.
absl::StatusOr<BuiltPlan> BuildGraphPlan(cudnnHandle_t handle, const CudnnAttentionShape& s,
                                         bool forward, bool deterministic) {
  GraphBuilder g(handle);
  absl::Status st = forward ? BuildForwardGraph(g, s) : BuildBackwardGraph(g, s, deterministic);
  if (!st.ok()) return Annotate(st, "building the graph");
  absl::StatusOr<ChosenPlan> chosen = g.BuildPlan(/*deterministic_only=*/deterministic);
  if (!chosen.ok()) return chosen.status();
  BuiltPlan built;
  size_t total = RoundUp(chosen->workspace, kScratchAlignment);
  if (!forward) {
    const size_t rows = static_cast<size_t>(s.n) * s.heads * s.tokens;
    built.softmax_sum_offset = total;
    total += RoundUp(rows * sizeof(float), kScratchAlignment);
    if (!deterministic) {
      built.dq_accum_offset = total;
      built.dq_accum_bytes = rows * s.dh * sizeof(float);
      total += RoundUp(built.dq_accum_bytes, kScratchAlignment);
    }
  }
  if (deterministic && total > kMaxDeterministicWorkspaceBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat(chosen->engine, " needs ", total, " bytes of workspace, over the ",
                     kMaxDeterministicWorkspaceBytes, " allowed for the deterministic graph"));
  }
  built.descs = g.TakeDescriptors();
  built.chosen = *std::move(chosen);
  built.total = total;
  return built;
}

}  // namespace

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
    STRAIT_ASSIGN_OR_RETURN(BuiltPlan built, BuildGraphPlan(handle_, s, forward, deterministic));
    plan->descs = std::move(built.descs);
    plan->plan = built.chosen.plan;
    plan->cudnn_workspace = built.chosen.workspace;
    plan->softmax_sum_offset = built.softmax_sum_offset;
    plan->dq_accum_offset = built.dq_accum_offset;
    plan->dq_accum_bytes = built.dq_accum_bytes;
    plan->total_workspace = built.total;
    plan->deterministic = forward || deterministic;
    plan->engine = built.chosen.engine;
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
