// Sums the gradient arenas of W replicas of a stage in place, bucket by bucket (DESIGN.md §4:
// local data parallelism). Two implementations: a shared-memory reduction for CPU replicas and
// NCCL for CUDA replicas (one device each).
//
// One round: the thread that drives replica w calls Ready(w, b) for every bucket b, in increasing
// b (bucket 0 first: the StageExecutor numbers buckets in backward order, so the round overlaps the
// backward pass), then Finish(w), which blocks until replica w's buffer holds, element by element,
// buffer_0 + buffer_1 + ... + buffer_{W-1}. Every replica takes part in every round, also after an
// error of its own (the others would wait for it forever); Finish reports errors. Ready and
// Finish of different replicas run concurrently; calls for one replica come from one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "site/backend/backend.h"

namespace strait::site {

// Floats [offset, offset + count) of every replica's buffer: reduced as one unit.
struct Bucket {
  int64_t offset = 0;
  int64_t count = 0;
};

class AllReducer {
 public:
  virtual ~AllReducer() = default;

  // Replica `replica`'s writes to bucket `bucket` are complete (CPU) or queued on the replica's
  // stream (CUDA): the bucket's reduction may start once every replica has said so. Does not wait
  // for the other replicas.
  virtual void Ready(int replica, int bucket) = 0;

  // Blocks until every bucket of replica `replica`'s buffer holds the sum and ends the round for
  // this replica. Returns the first error of this replica's round.
  virtual absl::Status Finish(int replica) = 0;

  // Cumulative seconds since creation: reducing (`busy`), and replica 0's Finish waiting for the
  // reduction (`exposed`: what the backward pass did not hide). Zeros where not measured.
  struct Times {
    double busy_s = 0;
    double exposed_s = 0;
  };
  virtual Times times() const { return {}; }
};

// buffers[w]: replica w's buffer in host memory (the CPU backend's memory); every bucket lies
// within each buffer, and no bucket overlaps another. The buffers are not owned and must outlive
// the reducer. The sum is the same bits on every run and every replica: for each element, replica
// 0 + replica 1 + ... in this order. The work is split over the replicas' threads: once a bucket
// is ready everywhere, replica w's thread reduces its w-th slice of it (in Ready or Finish).
absl::StatusOr<std::unique_ptr<AllReducer>> CreateCpuAllReducer(std::vector<float*> buffers,
                                                                std::vector<Bucket> buckets);

class GlooGroup;

// The all-reduce of a CPU site of several ranks (DESIGN.md §4): hierarchical. Once every local
// replica has made a bucket ready, a thread of the reducer's own sums the bucket in process (buffer
// 0 + buffer 1 + ..., in this order, into buffer 0), sums it across the group's ranks with Gloo and
// copies the result to the other local buffers, while the replicas go on with the backward pass.
// Buckets are summed in increasing order, the order every rank makes them ready, so the ranks'
// collectives pair up; the tag of bucket b is b. Not owned: `group` and the buffers must outlive
// the reducer; no other collective may run on `group` during a round.
absl::StatusOr<std::unique_ptr<AllReducer>> CreateCrossRankCpuReducer(std::vector<float*> buffers,
                                                                      std::vector<Bucket> buckets,
                                                                      GlooGroup* group);

// NCCL all-reduce (sum) of CUDA replicas: buffers[w] is device memory of backends[w], a CUDA
// backend on device devices[w] (distinct devices). Each bucket is one ncclAllReduce on a
// communication stream of the replica's device that waits for the work queued on the backend's
// stream so far, so it overlaps the rest of the backward pass. FailedPrecondition in a build
// without CUDA. Not owned: backends and buffers must outlive the reducer.
//
// With `clique`, the replicas are NCCL ranks clique->first_rank + w of clique->total, the other
// ranks in other processes (a CUDA site of several machines: every rank's devices, joined through
// the unique id that the site's leader made with NewNcclUniqueId and handed out through its
// rendezvous store; one id per reducer). Without, they form a clique of their own.
struct NcclClique {
  std::string unique_id;  // NewNcclUniqueId's bytes.
  int total = 0;
  int first_rank = 0;
};
absl::StatusOr<std::unique_ptr<AllReducer>> CreateNcclAllReducer(
    const std::vector<Backend*>& backends, const std::vector<int>& devices,
    std::vector<float*> buffers, std::vector<Bucket> buckets, const NcclClique* clique = nullptr);

// A fresh NCCL unique id (ncclGetUniqueId), as bytes. FailedPrecondition without CUDA.
absl::StatusOr<std::string> NewNcclUniqueId();

}  // namespace strait::site
