// The NCCL all-reduce of CUDA replicas (built only with STRAIT_WITH_CUDA): per replica one
// communicator of a clique made by ncclCommInitAll (this process's devices) or ncclCommInitRank
// (every rank's devices of a site of several machines), one communication stream, and one event
// per bucket that orders the bucket's ncclAllReduce after the backward work that wrote it.
#include <nccl.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/library_check.h"
#include "core/status.h"
#include "site/backend/cuda/cuda_backend.h"
#include "site/collective/all_reducer.h"

namespace strait::site {
namespace {

struct Replica {
  int device = 0;
  cudaStream_t compute = nullptr;  // the backend's (not owned)
  cudaStream_t comm = nullptr;
  ncclComm_t nccl = nullptr;
  float* buffer = nullptr;
  std::vector<cudaEvent_t> ready;  // per bucket
  absl::Status status;             // first error of the round
};

class NcclAllReducer final : public AllReducer {
 public:
  NcclAllReducer(std::vector<Replica> replicas, std::vector<Bucket> buckets)
      : replicas_(std::move(replicas)), buckets_(std::move(buckets)) {}

  ~NcclAllReducer() override {
    for (Replica& r : replicas_) {
      cudaSetDevice(r.device);
      if (r.comm != nullptr) cudaStreamSynchronize(r.comm);
      if (r.nccl != nullptr) ncclCommDestroy(r.nccl);
      for (cudaEvent_t e : r.ready) cudaEventDestroy(e);
      if (r.comm != nullptr) cudaStreamDestroy(r.comm);
    }
  }

  void Ready(int replica, int bucket) override {
    Replica& r = replicas_[replica];
    const Bucket& b = buckets_[bucket];
    if (b.count == 0) return;  // every replica skips an empty bucket alike
    r.status.Update(STRAIT_CUDA_CHECK(cudaSetDevice(r.device)));
    r.status.Update(STRAIT_CUDA_CHECK(cudaEventRecord(r.ready[bucket], r.compute)));
    r.status.Update(STRAIT_CUDA_CHECK(cudaStreamWaitEvent(r.comm, r.ready[bucket], 0)));
    // Issued even after an error: the other replicas' calls wait for this one's.
    float* p = r.buffer + b.offset;
    r.status.Update(STRAIT_NCCL_CHECK(
        ncclAllReduce(p, p, static_cast<size_t>(b.count), ncclFloat, ncclSum, r.nccl, r.comm)));
  }

  absl::Status Finish(int replica) override {
    Replica& r = replicas_[replica];
    absl::Status s = STRAIT_CUDA_CHECK(cudaSetDevice(r.device));
    if (s.ok()) s = STRAIT_CUDA_CHECK(cudaStreamSynchronize(r.comm));
    ncclResult_t async = ncclSuccess;
    if (s.ok()) s = STRAIT_NCCL_CHECK(ncclCommGetAsyncError(r.nccl, &async));
    if (s.ok()) s = STRAIT_NCCL_CHECK(async);
    r.status.Update(s);
    return std::exchange(r.status, absl::OkStatus());
  }

  // Makes the clique, the streams and the events; restores the caller's current device.
  absl::Status Init(const std::vector<int>& devices, const NcclClique* clique) {
    int caller_device = 0;
    STRAIT_RETURN_IF_ERROR(STRAIT_CUDA_CHECK(cudaGetDevice(&caller_device)));
    std::vector<ncclComm_t> comms(replicas_.size());
    absl::Status s;
    if (clique == nullptr) {
      s = STRAIT_NCCL_CHECK(
          ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), devices.data()));
    } else {
      ncclUniqueId id;
      std::memcpy(&id, clique->unique_id.data(), sizeof(id));
      // One group call: the communicators of this process's devices initialise together.
      s = STRAIT_NCCL_CHECK(ncclGroupStart());
      for (size_t w = 0; w < replicas_.size() && s.ok(); ++w) {
        s = STRAIT_CUDA_CHECK(cudaSetDevice(devices[w]));
        if (s.ok()) {
          s = STRAIT_NCCL_CHECK(ncclCommInitRank(&comms[w], clique->total, id,
                                                 clique->first_rank + static_cast<int>(w)));
        }
      }
      s.Update(STRAIT_NCCL_CHECK(ncclGroupEnd()));
    }
    for (size_t w = 0; w < replicas_.size() && s.ok(); ++w) {
      Replica& r = replicas_[w];
      r.nccl = comms[w];
      s = STRAIT_CUDA_CHECK(cudaSetDevice(r.device));
      if (s.ok()) s = STRAIT_CUDA_CHECK(cudaStreamCreateWithFlags(&r.comm, cudaStreamNonBlocking));
      for (size_t b = 0; b < buckets_.size() && s.ok(); ++b) {
        cudaEvent_t e = nullptr;
        s = STRAIT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        if (s.ok()) r.ready.push_back(e);
      }
    }
    cudaSetDevice(caller_device);
    return s;
  }

 private:
  std::vector<Replica> replicas_;
  const std::vector<Bucket> buckets_;
};

}  // namespace

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  STRAIT_RETURN_IF_ERROR(STRAIT_NCCL_CHECK(ncclGetUniqueId(&id)));
  return std::string(reinterpret_cast<const char*>(&id), sizeof(id));
}

absl::StatusOr<std::unique_ptr<AllReducer>> CreateNcclAllReducer(
    const std::vector<Backend*>& backends, const std::vector<int>& devices,
    std::vector<float*> buffers, std::vector<Bucket> buckets, const NcclClique* clique) {
  if (clique != nullptr &&
      (clique->unique_id.size() != sizeof(ncclUniqueId) || clique->first_rank < 0 ||
       clique->first_rank + static_cast<int>(backends.size()) > clique->total)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL clique: ranks ", clique->first_rank, " + ", backends.size(), " of ",
                     clique->total, " with a unique id of ", clique->unique_id.size(), " bytes (",
                     sizeof(ncclUniqueId), " expected)"));
  }
  if (backends.empty() || backends.size() != devices.size() || backends.size() != buffers.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL all-reduce: ", backends.size(), " backends, ", devices.size(),
                     " devices and ", buffers.size(), " buffers (one each per replica)"));
  }
  std::vector<Replica> replicas(backends.size());
  for (size_t w = 0; w < backends.size(); ++w) {
    replicas[w].device = devices[w];
    replicas[w].buffer = buffers[w];
    replicas[w].compute = static_cast<cudaStream_t>(CudaStreamOf(*backends[w]));
    if (replicas[w].compute == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("NCCL all-reduce: replica ", w, "'s backend is not a CUDA backend"));
    }
  }
  auto reducer = std::make_unique<NcclAllReducer>(std::move(replicas), std::move(buckets));
  STRAIT_RETURN_IF_ERROR(reducer->Init(devices, clique));
  return std::unique_ptr<AllReducer>(std::move(reducer));
}

}  // namespace strait::site
