// The cuDNN graph layer of cudnn_graph.h: descriptors are created, their attributes set one by one
// and finalized, each step's failure annotated with what was being built.
#include "site/backend/cuda/cudnn_graph.h"

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/library_check.h"
#include "core/status.h"

// Passes an attribute as its name (for messages) and its value.
#define STRAIT_ATTR(a) #a, a

namespace strait::site::cudnn_attention_internal {
namespace {

// At most this many engine configs are tried per heuristics mode.
constexpr int64_t kMaxEngineConfigs = 64;

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

// Sets `attrs` in order; stops at the first failure.
absl::Status SetAttrs(cudnnBackendDescriptor_t d, absl::string_view what,
                      absl::Span<const Attr> attrs) {
  for (const Attr& a : attrs) {
    STRAIT_RETURN_IF_ERROR(SetAttr(d, what, a.name, a.attr, a.type, a.count, a.values));
  }
  return absl::OkStatus();
}

// An attribute whose value is one descriptor (`d` must outlive the Attr's use).
Attr DescAttr(const char* name, cudnnBackendAttributeName_t attr,
              const cudnnBackendDescriptor_t& d) {
  return {name, attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d};
}

absl::Status FinalizeDesc(cudnnBackendDescriptor_t d, absl::string_view what) {
  return Annotate(STRAIT_CUDNN_CHECK(cudnnBackendFinalize(d)), absl::StrCat(what, ": finalize"));
}

void Note(std::string& failures, absl::string_view s) {
  absl::StrAppend(&failures, failures.empty() ? "" : "; ", s);
}

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

// A plan and the descriptors that must outlive it, in creation order.
struct FoundPlan {
  ChosenPlan chosen;
  Desc heur, cfg, plan;
};

// Finalizes `cfg`, engine config `i` of the heuristics `heur_what`, into an execution plan.
// nullopt (why appended to `failures`): skipped or refused. Errors: no plan descriptor.
absl::StatusOr<std::optional<FoundPlan>> TryConfig(cudnnHandle_t handle,
                                                   absl::string_view heur_what, int64_t i,
                                                   cudnnBackendDescriptor_t cfg,
                                                   bool deterministic_only, std::string& failures) {
  const EngineInfo info = DescribeEngine(cfg);
  const std::string engine = EngineName(info);
  const std::string plan_what = absl::StrCat(heur_what, " config ", i, " ", engine);
  if (deterministic_only && info.nondeterministic) {
    Note(failures, absl::StrCat(plan_what, ": skipped, nondeterministic"));
    return std::nullopt;
  }
  absl::StatusOr<Desc> plan = CreateDesc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan_what);
  if (!plan.ok()) return plan.status();
  absl::Status s =
      SetAttrs(plan->get(), plan_what,
               {{STRAIT_ATTR(CUDNN_ATTR_EXECUTION_PLAN_HANDLE), CUDNN_TYPE_HANDLE, 1, &handle},
                DescAttr(STRAIT_ATTR(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG), cfg)});
  // The first finalize of a runtime-compiled engine compiles its kernels (can take seconds).
  if (s.ok()) s = FinalizeDesc(plan->get(), plan_what);
  int64_t workspace = 0;
  int64_t got = 0;
  if (s.ok()) {
    s = Annotate(STRAIT_CUDNN_CHECK(
                     cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                              CUDNN_TYPE_INT64, 1, &got, &workspace)),
                 absl::StrCat(plan_what, ": workspace size"));
  }
  if (s.ok() && (got != 1 || workspace < 0)) {
    s = absl::InternalError(absl::StrCat(plan_what, ": bad workspace size ", workspace));
  }
  if (!s.ok()) {
    Note(failures, s.message());
    return std::nullopt;
  }
  FoundPlan found;
  found.chosen.plan = plan->get();
  found.chosen.workspace = static_cast<size_t>(workspace);
  found.chosen.engine = absl::StrCat(heur_what, " config ", i, ", ", engine);
  found.plan = std::move(*plan);
  return found;
}

// The first engine config of heuristics `mode` for `graph` that finalizes into a plan. nullopt
// (why appended to `failures`): none did. Errors: a descriptor could not be created.
absl::StatusOr<std::optional<FoundPlan>> FirstPlanOf(cudnnHandle_t handle,
                                                     cudnnBackendDescriptor_t graph,
                                                     cudnnBackendHeurMode_t mode,
                                                     bool deterministic_only,
                                                     std::string& failures) {
  const std::string heur_what =
      absl::StrCat("heuristics mode ", mode == CUDNN_HEUR_MODE_A ? "A" : "FALLBACK");
  absl::StatusOr<Desc> heur = CreateDesc(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, heur_what);
  if (!heur.ok()) return heur.status();
  absl::Status s =
      SetAttrs(heur->get(), heur_what,
               {DescAttr(STRAIT_ATTR(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH), graph),
                {STRAIT_ATTR(CUDNN_ATTR_ENGINEHEUR_MODE), CUDNN_TYPE_HEUR_MODE, 1, &mode}});
  if (s.ok()) s = FinalizeDesc(heur->get(), heur_what);
  int64_t count = 0;
  if (s.ok()) {
    s = Annotate(STRAIT_CUDNN_CHECK(
                     cudnnBackendGetAttribute(heur->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr)),
                 absl::StrCat(heur_what, ": count results"));
  }
  if (!s.ok()) {
    Note(failures, s.message());
    return std::nullopt;
  }
  if (count <= 0) {
    Note(failures, absl::StrCat(heur_what, ": no engine configs"));
    return std::nullopt;
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
                   heur->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                   &returned, raw_cfgs.data())),
               absl::StrCat(heur_what, ": get results"));
  if (!s.ok()) {
    Note(failures, s.message());
    return std::nullopt;
  }
  returned = std::min(returned, count);
  for (int64_t i = 0; i < returned; ++i) {
    STRAIT_ASSIGN_OR_RETURN(
        std::optional<FoundPlan> found,
        TryConfig(handle, heur_what, i, cfgs[i].get(), deterministic_only, failures));
    if (!found.has_value()) continue;
    found->heur = std::move(*heur);
    found->cfg = std::move(cfgs[i]);
    return found;
  }
  return std::nullopt;
}

}  // namespace

void DestroyInReverse(std::vector<Desc>& descs) {
  while (!descs.empty()) descs.pop_back();
}

absl::Status Annotate(const absl::Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Tensor(absl::string_view name, int64_t uid,
                                                              cudnnDataType_t type,
                                                              const Dims& dims, const Dims& strides,
                                                              bool is_virtual, bool by_value) {
  const std::string what = absl::StrCat("tensor '", name, "' (uid ", uid, ")");
  const bool virtual_flag = is_virtual;
  const bool by_value_flag = by_value;
  std::vector<Attr> attrs = {
      {STRAIT_ATTR(CUDNN_ATTR_TENSOR_DATA_TYPE), CUDNN_TYPE_DATA_TYPE, 1, &type},
      {STRAIT_ATTR(CUDNN_ATTR_TENSOR_DIMENSIONS), CUDNN_TYPE_INT64, 4, dims.data()},
      {STRAIT_ATTR(CUDNN_ATTR_TENSOR_STRIDES), CUDNN_TYPE_INT64, 4, strides.data()},
      {STRAIT_ATTR(CUDNN_ATTR_TENSOR_UNIQUE_ID), CUDNN_TYPE_INT64, 1, &uid},
      {STRAIT_ATTR(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), CUDNN_TYPE_INT64, 1, &kByteAlignment},
      {STRAIT_ATTR(CUDNN_ATTR_TENSOR_IS_VIRTUAL), CUDNN_TYPE_BOOLEAN, 1, &virtual_flag}};
  if (by_value_flag) {
    attrs.push_back(
        {STRAIT_ATTR(CUDNN_ATTR_TENSOR_IS_BY_VALUE), CUDNN_TYPE_BOOLEAN, 1, &by_value_flag});
  }
  return Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what, attrs);
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Io(const TensorSpec& t, int64_t uid) {
  return Tensor(t.name, uid, t.type, t.dims, t.strides, /*is_virtual=*/false);
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Scalar(absl::string_view name, int64_t uid) {
  const Dims one = {1, 1, 1, 1};
  return Tensor(name, uid, CUDNN_DATA_FLOAT, one, one, /*is_virtual=*/false, /*by_value=*/true);
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Virtual(const TensorSpec& t) {
  return Tensor(t.name, next_virtual_uid_++, t.type, t.dims, t.strides, /*is_virtual=*/true);
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Pointwise(
    absl::string_view name, cudnnPointwiseMode_t mode, cudnnDataType_t math_precision,
    cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
    const Output& y, int64_t axis) {
  STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t out, Made(y));
  const std::string what = absl::StrCat("pointwise '", name, "'");
  std::vector<Attr> pw_attrs = {
      {STRAIT_ATTR(CUDNN_ATTR_POINTWISE_MODE), CUDNN_TYPE_POINTWISE_MODE, 1, &mode},
      {STRAIT_ATTR(CUDNN_ATTR_POINTWISE_MATH_PREC), CUDNN_TYPE_DATA_TYPE, 1, &math_precision}};
  if (mode == CUDNN_POINTWISE_GEN_INDEX) {
    pw_attrs.push_back({STRAIT_ATTR(CUDNN_ATTR_POINTWISE_AXIS), CUDNN_TYPE_INT64, 1, &axis});
  }
  STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t pw,
                          Make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what, pw_attrs));
  std::vector<Attr> op_attrs = {
      DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR), pw),
      DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_XDESC), x)};
  if (b != nullptr)
    op_attrs.push_back(DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_BDESC), b));
  if (t != nullptr)
    op_attrs.push_back(DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_TDESC), t));
  op_attrs.push_back(DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_POINTWISE_YDESC), out));
  STRAIT_RETURN_IF_ERROR(
      AddOperation(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what, op_attrs).status());
  return out;
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Unary(absl::string_view name,
                                                             cudnnPointwiseMode_t mode,
                                                             cudnnBackendDescriptor_t x,
                                                             const Output& y) {
  return Pointwise(name, mode, CUDNN_DATA_FLOAT, x, nullptr, nullptr, y);
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Binary(absl::string_view name,
                                                              cudnnPointwiseMode_t mode,
                                                              cudnnBackendDescriptor_t x,
                                                              cudnnBackendDescriptor_t b,
                                                              const Output& y) {
  return Pointwise(name, mode, CUDNN_DATA_FLOAT, x, b, nullptr, y);
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Matmul(absl::string_view name,
                                                              cudnnBackendDescriptor_t a,
                                                              cudnnBackendDescriptor_t b,
                                                              const Output& c) {
  STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t out, Made(c));
  const std::string what = absl::StrCat("matmul '", name, "'");
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  STRAIT_ASSIGN_OR_RETURN(
      cudnnBackendDescriptor_t mm,
      Make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, what,
           {{STRAIT_ATTR(CUDNN_ATTR_MATMUL_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, 1, &compute}}));
  STRAIT_RETURN_IF_ERROR(
      AddOperation(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what,
                   {DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_MATMUL_ADESC), a),
                    DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_MATMUL_BDESC), b),
                    DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_MATMUL_CDESC), out),
                    DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_MATMUL_DESC), mm)})
          .status());
  return out;
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Reduction(absl::string_view name,
                                                                 cudnnReduceTensorOp_t reduce_op,
                                                                 cudnnBackendDescriptor_t x,
                                                                 const Output& y) {
  STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t out, Made(y));
  const std::string what = absl::StrCat("reduction '", name, "'");
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  STRAIT_ASSIGN_OR_RETURN(
      cudnnBackendDescriptor_t red,
      Make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what,
           {{STRAIT_ATTR(CUDNN_ATTR_REDUCTION_OPERATOR), CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1,
             &reduce_op},
            {STRAIT_ATTR(CUDNN_ATTR_REDUCTION_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, 1, &compute}}));
  STRAIT_RETURN_IF_ERROR(
      AddOperation(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what,
                   {DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_XDESC), x),
                    DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_YDESC), out),
                    DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_REDUCTION_DESC), red)})
          .status());
  return out;
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Reshape(absl::string_view name,
                                                               cudnnBackendDescriptor_t x,
                                                               const Output& y) {
  STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t out, Made(y));
  const std::string what = absl::StrCat("reshape '", name, "'");
  STRAIT_RETURN_IF_ERROR(
      AddOperation(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what,
                   {DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_RESHAPE_XDESC), x),
                    DescAttr(STRAIT_ATTR(CUDNN_ATTR_OPERATION_RESHAPE_YDESC), out)})
          .status());
  return out;
}

absl::StatusOr<ChosenPlan> GraphBuilder::BuildPlan(bool deterministic_only) {
  STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t graph, FinalizeGraph());
  std::string failures;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    STRAIT_ASSIGN_OR_RETURN(std::optional<FoundPlan> found,
                            FirstPlanOf(handle_, graph, mode, deterministic_only, failures));
    if (!found.has_value()) continue;
    // Kept alive in creation order: the heuristics, the config, the plan.
    descs_.push_back(std::move(found->heur));
    descs_.push_back(std::move(found->cfg));
    descs_.push_back(std::move(found->plan));
    return std::move(found->chosen);
  }
  return absl::UnimplementedError(absl::StrCat("no engine finalized: ", failures));
}

std::vector<Desc> GraphBuilder::TakeDescriptors() { return std::exchange(descs_, {}); }

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Adopt(absl::StatusOr<Desc> d) {
  if (!d.ok()) return d.status();
  descs_.push_back(std::move(*d));
  return descs_.back().get();
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Make(cudnnBackendDescriptorType_t type,
                                                            absl::string_view what,
                                                            absl::Span<const Attr> attrs) {
  STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t d, Adopt(CreateDesc(type, what)));
  STRAIT_RETURN_IF_ERROR(SetAttrs(d, what, attrs));
  STRAIT_RETURN_IF_ERROR(FinalizeDesc(d, what));
  return d;
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::AddOperation(
    cudnnBackendDescriptorType_t type, absl::string_view what, absl::Span<const Attr> attrs) {
  STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t op, Make(type, what, attrs));
  ops_.push_back(op);
  return op;
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::Made(const Output& out) {
  if (const auto* made = std::get_if<cudnnBackendDescriptor_t>(&out)) return *made;
  return Virtual(std::get<TensorSpec>(out));
}

absl::StatusOr<cudnnBackendDescriptor_t> GraphBuilder::FinalizeGraph() {
  const std::string what = "operation graph";
  STRAIT_ASSIGN_OR_RETURN(cudnnBackendDescriptor_t graph,
                          Adopt(CreateDesc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what)));
  STRAIT_RETURN_IF_ERROR(
      SetAttrs(graph, what,
               {{STRAIT_ATTR(CUDNN_ATTR_OPERATIONGRAPH_HANDLE), CUDNN_TYPE_HANDLE, 1, &handle_},
                {STRAIT_ATTR(CUDNN_ATTR_OPERATIONGRAPH_OPS), CUDNN_TYPE_BACKEND_DESCRIPTOR,
                 static_cast<int64_t>(ops_.size()), ops_.data()}}));
  STRAIT_RETURN_IF_ERROR(FinalizeDesc(graph, "operation graph (cuDNN refused the pattern)"));
  return graph;
}

absl::Status Execute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                     const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
                     void* workspace) {
  const std::string what = "variant pack";
  STRAIT_ASSIGN_OR_RETURN(Desc pack, CreateDesc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what));
  STRAIT_RETURN_IF_ERROR(SetAttrs(
      pack.get(), what,
      {{STRAIT_ATTR(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), CUDNN_TYPE_INT64,
        static_cast<int64_t>(uids.size()), uids.data()},
       {STRAIT_ATTR(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS), CUDNN_TYPE_VOID_PTR,
        static_cast<int64_t>(pointers.size()), pointers.data()},
       {STRAIT_ATTR(CUDNN_ATTR_VARIANT_PACK_WORKSPACE), CUDNN_TYPE_VOID_PTR, 1, &workspace}}));
  STRAIT_RETURN_IF_ERROR(FinalizeDesc(pack.get(), what));
  return Annotate(STRAIT_CUDNN_CHECK(cudnnBackendExecute(handle, plan, pack.get())), "execute");
}

}  // namespace strait::site::cudnn_attention_internal

#undef STRAIT_ATTR
