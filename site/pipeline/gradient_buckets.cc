#include "site/pipeline/gradient_buckets.h"

#include <utility>

#include "core/status.h"

namespace strait::site {

ReducerMaker InProcessReducer(DeviceKind device) {
  return [device](const std::vector<Backend*>& backends, std::vector<float*> arenas,
                  std::vector<Bucket> buckets) -> absl::StatusOr<std::unique_ptr<AllReducer>> {
    if (backends.size() < 2) return nullptr;  // One worker's sum is its own gradient.
    if (device == DeviceKind::kCpu) {
      return CreateCpuAllReducer(std::move(arenas), std::move(buckets));
    }
    std::vector<int> devices;
    for (size_t w = 0; w < backends.size(); ++w) devices.push_back(static_cast<int>(w));
    return CreateNcclAllReducer(backends, devices, std::move(arenas), std::move(buckets));
  };
}

absl::StatusOr<std::unique_ptr<GradientBuckets>> GradientBuckets::Create(const WorkerSet& workers,
                                                                         const ReducerMaker& make,
                                                                         DeviceKind device) {
  std::unique_ptr<GradientBuckets> b(new GradientBuckets(device));
  // One bucket per layer with parameters, numbered in backward order (last layer first), which is
  // the order in which Backward makes them ready.
  const std::vector<int64_t>& offsets = workers.at(0).stage->layer_offsets();
  const int layers = static_cast<int>(offsets.size()) - 1;
  std::vector<Bucket> buckets;
  b->layer_bucket_.assign(layers, -1);
  for (int k = layers; k-- > 0;) {
    if (offsets[k + 1] == offsets[k]) continue;
    b->layer_bucket_[k] = static_cast<int>(buckets.size());
    buckets.push_back({offsets[k], offsets[k + 1] - offsets[k]});
  }
  b->num_buckets_ = static_cast<int>(buckets.size());
  std::vector<Backend*> backends;
  for (int w = 0; w < workers.count(); ++w) backends.push_back(workers.at(w).backend.get());
  // Gradient arena a holds the gradients of the steps with step % weight_versions == a.
  for (int64_t arena = 0; arena < workers.at(0).history->versions(); ++arena) {
    std::vector<float*> arenas;
    for (int w = 0; w < workers.count(); ++w) arenas.push_back(workers.at(w).history->grads(arena));
    STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<AllReducer> reducer,
                            make(backends, std::move(arenas), buckets));
    if (reducer == nullptr) break;  // Nothing to reduce.
    b->reducers_.push_back(std::move(reducer));
  }
  return b;
}

GradientRound::GradientRound(const GradientBuckets& buckets, int worker, Backend& backend,
                             int64_t step, bool last_of_step)
    : buckets_(buckets),
      worker_(worker),
      backend_(backend),
      reducer_(last_of_step && !buckets.reducers_.empty()
                   ? buckets.reducers_[step % buckets.reducers_.size()].get()
                   : nullptr) {
  if (reducer_ == nullptr) return;
  layer_done_ = [this](int layer) {
    const int bucket = buckets_.layer_bucket_[layer];
    if (bucket < 0) return;
    // The CPU reduction reads the arena directly: the backward's work must be done. (CUDA: the
    // NCCL reducer orders itself after the queued work without waiting.)
    if (buckets_.device_ == DeviceKind::kCpu) status_.Update(backend_.Sync());
    reducer_->Ready(worker_, bucket);
    next_bucket_ = bucket + 1;
  };
}

absl::Status GradientRound::Finish(absl::Status pass) {
  status_.Update(pass);
  if (reducer_ == nullptr) return status_;
  // A worker without rows, or whose backward failed, still takes part in the round.
  while (next_bucket_ < buckets_.num_buckets_) reducer_->Ready(worker_, next_bucket_++);
  status_.Update(reducer_->Finish(worker_));
  return status_;
}

}  // namespace strait::site
