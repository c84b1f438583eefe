// Local data parallelism inside a site (DESIGN.md §4): W workers hold identical replicas of one
// pipeline stage (site/nn/stage.h), each on its own backend (CPU with threads_per_worker threads,
// or CUDA device w), and each microbatch is split by rows across them. Parameter gradients are
// summed across the replicas during the backward pass of a step's last microbatch (bucketed per
// layer, overlapped with that pass: site/collective/all_reducer.h), then every replica applies the
// same optimizer step, so the replicas stay identical. With two weight versions (2bw, see
// site/nn/stage.h) each replica has two gradient arenas, and the all-reduce of a step sums the
// arena of that step.
//
// The API mirrors Stage's, on whole microbatches in host memory, so the site daemon drives a
// ReplicaGroup as it would drive a Stage and its neighbours never see the split. With W = 1 it is
// exactly a Stage (same bits, no extra thread); with W > 1 it equals a Stage up to the order of
// float sums (rows split across GEMMs, the gradient sum across replicas): dropout masks are the
// whole microbatch's whatever the split (PassInfo::first_row). Same W, same bits on every run.
//
// Workers run on a persistent pool of W threads; the caller blocks until they are done. A worker
// holds at most ceil(max_batch / W) rows; when a microbatch has fewer rows than workers, some
// workers sit it out (and still take part in the all-reduce). Not thread-safe: one thread drives
// a ReplicaGroup, as a Stage.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/job_spec.h"
#include "site/backend/backend.h"
#include "site/collective/all_reducer.h"
#include "site/collective/worker_pool.h"
#include "site/nn/stage.h"

namespace strait::collective {

class ReplicaGroup {
 public:
  // Layers `range` of `model` on `workers` >= 1 workers of kind `device`, microbatches of at most
  // `max_batch` samples (what Forward takes; each worker's stage is sized for its share). Makes
  // the backends (CUDA: devices 0 .. workers-1; errors when there are fewer) and the all-reducer
  // (one per gradient arena). weight_versions, lookahead: as Stage::Create.
  static absl::StatusOr<std::unique_ptr<ReplicaGroup>> Create(
      const ModelSpec& model, LayerRange range, const OptimizerSpec& optimizer, int max_batch,
      DeviceKind device, int workers, int threads_per_worker, int weight_versions = 1,
      float lookahead = 0.0f);
  ~ReplicaGroup();
  ReplicaGroup(const ReplicaGroup&) = delete;
  ReplicaGroup& operator=(const ReplicaGroup&) = delete;

  LayerRange range() const { return stage(0).range(); }
  bool is_first() const { return stage(0).is_first(); }
  bool is_last() const { return stage(0).is_last(); }
  int64_t input_features() const { return stage(0).input_features(); }
  int64_t output_features() const { return stage(0).output_features(); }
  int64_t param_count() const { return stage(0).param_count(); }
  int max_batch() const { return max_batch_; }
  int workers() const { return static_cast<int>(workers_.size()); }
  uint64_t Fingerprint() const { return stage(0).Fingerprint(); }
  int weight_versions() const { return stage(0).weight_versions(); }
  float lookahead() const { return stage(0).lookahead(); }
  int64_t weights_version() const { return stage(0).weights_version(); }
  // The workers' backends, e.g. "cpu (1 threads), cpu (1 threads)".
  std::string device_names() const;

  // Stage::Forward on the whole microbatch: input [n, input_features()], output [n,
  // output_features()] (skipped when null), 1 <= n <= max_batch(); worker w takes its rows.
  // weights: as Stage::Forward.
  absl::Status Forward(int64_t step, int microbatch, int n, const float* input, float* output,
                       bool training = true, int64_t weights = kNewestWeights);

  // Stage::Loss on the whole microbatch (labels [n]): the workers' results summed in worker order.
  absl::StatusOr<LossResult> Loss(int microbatch, const int32_t* labels, float grad_scale);

  // Stage::Backward on the whole microbatch. last_of_step: this is the step's last microbatch, so
  // the gradient all-reduce of the microbatch's step runs (bucketed, overlapped with this backward)
  // and is complete when this returns; every microbatch of that step before it must have been
  // backpropagated.
  absl::Status Backward(int microbatch, const float* grad_output, float* grad_input,
                        bool last_of_step = false);

  void Discard(int microbatch);
  void ZeroGrad(int64_t step = 0);
  // Stage::GradSumSquares of the summed gradient of `step` (replica 0's, after that step's
  // last_of_step Backward).
  absl::StatusOr<double> GradSumSquares(double downstream = 0.0, int64_t step = 0);
  // Every replica applies the optimizer to its (identical) summed gradients.
  absl::Status OptimizerStep(int64_t step, float grad_scale);

  // Replica 0's arenas (every replica holds the same); the setters write every replica.
  absl::StatusOr<std::vector<float>> Params() const;
  absl::StatusOr<std::vector<float>> PreviousParams() const;
  absl::StatusOr<std::vector<float>> LookaheadParams() const;
  absl::StatusOr<std::vector<float>> Grads(int64_t step = 0) const;
  absl::StatusOr<std::vector<float>> OptimizerState() const;
  absl::Status SetParams(absl::Span<const float> params);
  absl::Status RestoreWeights(int64_t version, absl::Span<const float> newest,
                              absl::Span<const float> previous,
                              absl::Span<const float> lookahead = {});
  absl::Status SetOptimizerState(absl::Span<const float> state);

 private:
  struct Worker {
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Stage> stage;  // declared after the backend it uses: destroyed first
  };

  ReplicaGroup() = default;
  const Stage& stage(int w) const { return *workers_[w].stage; }
  // Rows [first, first + count) of an n-row microbatch that worker w takes.
  std::pair<int64_t, int> Rows(int n, int w) const;
  // fn(w) for every worker, each on its own thread (on the caller's when W = 1).
  absl::Status OnWorkers(const std::function<absl::Status(int worker)>& fn) const;
  // fn on worker 0's thread.
  absl::Status OnWorker0(const std::function<absl::Status(Stage&)>& fn) const;
  absl::Status BackwardOnWorker(int w, int microbatch, int n, int64_t step,
                                const float* grad_output, float* grad_input, bool last_of_step);
  // fn on worker 0's thread, returning its result.
  template <class T>
  absl::StatusOr<T> FromWorker0(const std::function<absl::StatusOr<T>(const Stage&)>& fn) const;

  std::vector<Worker> workers_;
  std::unique_ptr<WorkerPool> pool_;                   // W > 1 only
  std::vector<std::unique_ptr<AllReducer>> reducers_;  // W > 1 only: one per gradient arena
  std::vector<int> layer_bucket_;                      // stage layer -> bucket (-1: no parameters)
  int num_buckets_ = 0;
  DeviceKind device_ = DeviceKind::kCpu;
  int max_batch_ = 0;
  struct InFlight {
    int rows = 0;
    int64_t step = 0;
  };
  std::map<int, InFlight> in_flight_;  // by microbatch
};

}  // namespace strait::collective
