// A thin layer over cuDNN's backend (graph) C API, for the flash attention of cudnn_attention.h:
// owned descriptors, a builder that makes the tensors and operations of one operation graph and
// then its execution plan (the first engine config of the heuristics that finalizes), and the
// execution of a plan. Every failure is an absl::Status that names the descriptor, the step
// (create, set <attribute>, finalize) and cuDNN's error (STRAIT_CUDNN_CHECK). Host code; includes
// <cudnn.h>, so only site/backend/cuda includes it. Not thread-safe: a builder belongs to one
// thread.
#pragma once

#include <cudnn.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace strait::site::cudnn_attention_internal {

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
void DestroyInReverse(std::vector<Desc>& descs);

// `s` with "<context>: " before its message; OK stays OK.
absl::Status Annotate(const absl::Status& s, absl::string_view context);

// The alignment every tensor declares (CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT): each pointer bound to one
// must have it.
inline constexpr int64_t kByteAlignment = 16;

using Dims = std::array<int64_t, 4>;

// A tensor to make: its name (for messages), data type, dims and strides.
struct TensorSpec {
  absl::string_view name;
  cudnnDataType_t type;
  Dims dims, strides;
};

// Where an operation writes: a tensor made before, or the spec of a virtual tensor that the builder
// makes (with the next free uid) just before the operation.
using Output = std::variant<cudnnBackendDescriptor_t, TensorSpec>;

// One attribute to set on a descriptor: its name (for messages), the attribute, the type and count
// of its values, and where they are (read when it is set).
struct Attr {
  const char* name;
  cudnnBackendAttributeName_t attr;
  cudnnBackendAttributeType_t type;
  int64_t count;
  const void* values;
};

// The finalized execution plan of a graph.
struct ChosenPlan {
  cudnnBackendDescriptor_t plan = nullptr;
  size_t workspace = 0;
  std::string engine;
};

// Builds the tensors and operations of one operation graph, then its execution plan; owns every
// descriptor it creates until TakeDescriptors. Unique ids: the caller's for the tensors it binds,
// from kFirstVirtualUid up for the virtual ones, in the order they are made.
class GraphBuilder {
 public:
  static constexpr int64_t kFirstVirtualUid = 1000;

  explicit GraphBuilder(cudnnHandle_t handle) : handle_(handle) {}
  ~GraphBuilder() { DestroyInReverse(descs_); }
  GraphBuilder(const GraphBuilder&) = delete;
  GraphBuilder& operator=(const GraphBuilder&) = delete;

  // A finalized tensor descriptor.
  absl::StatusOr<cudnnBackendDescriptor_t> Tensor(absl::string_view name, int64_t uid,
                                                  cudnnDataType_t type, const Dims& dims,
                                                  const Dims& strides, bool is_virtual,
                                                  bool by_value = false);
  // A tensor the caller binds to memory by `uid`.
  absl::StatusOr<cudnnBackendDescriptor_t> Io(const TensorSpec& t, int64_t uid);
  // A pass-by-value fp32 [1, 1, 1, 1] scalar: the caller binds `uid` to a host pointer to it.
  absl::StatusOr<cudnnBackendDescriptor_t> Scalar(absl::string_view name, int64_t uid);
  // A virtual tensor with the next free uid.
  absl::StatusOr<cudnnBackendDescriptor_t> Virtual(const TensorSpec& t);

  // The operations: each adds itself to the graph and returns its output tensor.
  // y = mode(x[, b][, t]). `axis` only for GEN_INDEX.
  absl::StatusOr<cudnnBackendDescriptor_t> Pointwise(
      absl::string_view name, cudnnPointwiseMode_t mode, cudnnDataType_t math_precision,
      cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
      const Output& y, int64_t axis = -1);
  // y = mode(x) and y = mode(x, b) in fp32.
  absl::StatusOr<cudnnBackendDescriptor_t> Unary(absl::string_view name, cudnnPointwiseMode_t mode,
                                                 cudnnBackendDescriptor_t x, const Output& y);
  absl::StatusOr<cudnnBackendDescriptor_t> Binary(absl::string_view name, cudnnPointwiseMode_t mode,
                                                  cudnnBackendDescriptor_t x,
                                                  cudnnBackendDescriptor_t b, const Output& y);
  // c = a @ b (batched over the first two dims), fp32 accumulation.
  absl::StatusOr<cudnnBackendDescriptor_t> Matmul(absl::string_view name,
                                                  cudnnBackendDescriptor_t a,
                                                  cudnnBackendDescriptor_t b, const Output& c);
  // y = reduce(x) over the dims where y has extent 1, fp32.
  absl::StatusOr<cudnnBackendDescriptor_t> Reduction(absl::string_view name,
                                                     cudnnReduceTensorOp_t reduce_op,
                                                     cudnnBackendDescriptor_t x, const Output& y);
  // y = x viewed with y's dims and strides (a transpose of the last two dims here).
  absl::StatusOr<cudnnBackendDescriptor_t> Reshape(absl::string_view name,
                                                   cudnnBackendDescriptor_t x, const Output& y);

  // Finalizes the operation graph of every operation added, asks the heuristics (mode A, then
  // FALLBACK) for engine configs and returns the first that finalizes into an execution plan. With
  // `deterministic_only`, configs whose engine carries CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC are
  // skipped. The plan (and what it references) stays owned by the builder.
  absl::StatusOr<ChosenPlan> BuildPlan(bool deterministic_only);

  std::vector<Desc> TakeDescriptors();

 private:
  // Keeps `d` until the builder (or whoever takes the descriptors) goes; returns its handle.
  absl::StatusOr<cudnnBackendDescriptor_t> Adopt(absl::StatusOr<Desc> d);
  // A descriptor of `type` with `attrs` set in order, finalized and adopted.
  absl::StatusOr<cudnnBackendDescriptor_t> Make(cudnnBackendDescriptorType_t type,
                                                absl::string_view what,
                                                absl::Span<const Attr> attrs);
  // Make, then adds the operation to the graph.
  absl::StatusOr<cudnnBackendDescriptor_t> AddOperation(cudnnBackendDescriptorType_t type,
                                                        absl::string_view what,
                                                        absl::Span<const Attr> attrs);
  // The output's tensor: the one given, or a new virtual one.
  absl::StatusOr<cudnnBackendDescriptor_t> Made(const Output& out);
  // The finalized operation graph of the operations added.
  absl::StatusOr<cudnnBackendDescriptor_t> FinalizeGraph();

  cudnnHandle_t handle_;
  std::vector<Desc> descs_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_uid_ = kFirstVirtualUid;
};

// Runs `plan` on the handle's stream with the given tensors (pointers[i] bound to uids[i]) and
// workspace.
absl::Status Execute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                     const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
                     void* workspace);

}  // namespace strait::site::cudnn_attention_internal
