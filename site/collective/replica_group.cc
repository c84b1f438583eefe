#include "site/collective/replica_group.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "site/backend/backend_factory.h"

namespace strait::collective {

absl::StatusOr<std::unique_ptr<ReplicaGroup>> ReplicaGroup::Create(
    const ModelSpec& model, LayerRange range, const OptimizerSpec& optimizer, int max_batch,
    DeviceKind device, int workers, int threads_per_worker, int weight_versions, float lookahead) {
  if (max_batch < 1 || workers < 1 || threads_per_worker < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica group of ", workers, " workers with ", threads_per_worker,
                     " threads each and microbatches of ", max_batch, ": all must be at least 1"));
  }
  std::unique_ptr<ReplicaGroup> g(new ReplicaGroup());
  g->device_ = device;
  g->max_batch_ = max_batch;
  g->workers_.resize(workers);
  if (workers > 1) g->pool_ = std::make_unique<WorkerPool>(workers);
  // Each worker makes its backend and stage on its own thread (CUDA: device w becomes current).
  const int worker_batch = (max_batch + workers - 1) / workers;
  STRAIT_RETURN_IF_ERROR(g->OnWorkers([&](int w) -> absl::Status {
    Worker& worker = g->workers_[w];
    STRAIT_ASSIGN_OR_RETURN(worker.backend, CreateBackend(device, {threads_per_worker, w}));
    STRAIT_ASSIGN_OR_RETURN(
        worker.stage, Stage::Create(model, range, optimizer, worker_batch, worker.backend.get(),
                                    weight_versions, lookahead));
    return absl::OkStatus();
  }));
  if (workers == 1) return g;

  // One bucket per layer with parameters, numbered in backward order (last layer first), which is
  // the order in which Backward makes them ready.
  const auto& layers = g->stage(0).layers();
  std::vector<int64_t> offsets(layers.size() + 1, 0);
  for (size_t k = 0; k < layers.size(); ++k) {
    offsets[k + 1] = offsets[k];
    for (const ParamLayout& p : layers[k]->layout().params) offsets[k + 1] += p.numel;
  }
  std::vector<Bucket> buckets;
  g->layer_bucket_.assign(layers.size(), -1);
  for (size_t k = layers.size(); k-- > 0;) {
    if (offsets[k + 1] == offsets[k]) continue;
    g->layer_bucket_[k] = static_cast<int>(buckets.size());
    buckets.push_back({offsets[k], offsets[k + 1] - offsets[k]});
  }
  g->num_buckets_ = static_cast<int>(buckets.size());
  std::vector<Backend*> backends;
  std::vector<int> devices;
  for (int w = 0; w < workers; ++w) {
    backends.push_back(g->workers_[w].backend.get());
    devices.push_back(w);
  }
  // Gradient arena a holds the gradients of the steps with step % weight_versions == a.
  for (int64_t arena = 0; arena < weight_versions; ++arena) {
    std::vector<float*> arenas;
    for (int w = 0; w < workers; ++w) arenas.push_back(g->workers_[w].stage->grad_arena(arena));
    std::unique_ptr<AllReducer> reducer;
    if (device == DeviceKind::kCpu) {
      STRAIT_ASSIGN_OR_RETURN(reducer, CreateCpuAllReducer(std::move(arenas), buckets));
    } else {
      STRAIT_ASSIGN_OR_RETURN(reducer,
                              CreateNcclAllReducer(backends, devices, std::move(arenas), buckets));
    }
    g->reducers_.push_back(std::move(reducer));
  }
  return g;
}

ReplicaGroup::~ReplicaGroup() {
  reducers_.clear();
  if (pool_ == nullptr) return;
  // Each backend is torn down on the thread that made it (its device is current there).
  pool_
      ->Run([&](int w) {
        workers_[w].stage.reset();
        workers_[w].backend.reset();
        return absl::OkStatus();
      })
      .IgnoreError();
}

std::string ReplicaGroup::device_names() const {
  std::string names;
  for (const Worker& w : workers_) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", w.backend->Name());
  }
  return names;
}

std::pair<int64_t, int> ReplicaGroup::Rows(int n, int w) const {
  const int base = n / workers(), extra = n % workers();
  return {int64_t{w} * base + std::min(w, extra), base + (w < extra ? 1 : 0)};
}

absl::Status ReplicaGroup::OnWorkers(const std::function<absl::Status(int)>& fn) const {
  if (pool_ == nullptr) return fn(0);
  return pool_->Run(fn);
}

absl::Status ReplicaGroup::OnWorker0(const std::function<absl::Status(Stage&)>& fn) const {
  return OnWorkers([&](int w) { return w == 0 ? fn(*workers_[0].stage) : absl::OkStatus(); });
}

absl::Status ReplicaGroup::Forward(int64_t step, int microbatch, int n, const float* input,
                                   float* output, bool training, int64_t weights) {
  if (n < 1 || n > max_batch_) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatch of ", n, " samples; this stage takes 1 to ", max_batch_));
  }
  if (in_flight_.count(microbatch) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("Forward(microbatch ", microbatch, ") while it is already in flight"));
  }
  const int64_t in = input_features(), out = output_features();
  absl::Status s = OnWorkers([&](int w) {
    const auto [first, rows] = Rows(n, w);
    if (rows == 0) return absl::OkStatus();
    return workers_[w].stage->Forward(step, microbatch, rows, input + first * in,
                                      output != nullptr ? output + first * out : nullptr, training,
                                      first, weights);
  });
  if (!s.ok()) {
    OnWorkers([&](int w) {
      workers_[w].stage->Discard(microbatch);
      return absl::OkStatus();
    }).IgnoreError();
    return s;
  }
  in_flight_[microbatch] = {n, step};
  return absl::OkStatus();
}

absl::StatusOr<LossResult> ReplicaGroup::Loss(int microbatch, const int32_t* labels,
                                              float grad_scale) {
  if (!is_last()) return absl::FailedPreconditionError("Loss on a stage that is not the last");
  auto it = in_flight_.find(microbatch);
  if (it == in_flight_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Loss(microbatch ", microbatch, ") without a Forward of that microbatch"));
  }
  const int n = it->second.rows;
  std::vector<LossResult> parts(workers());
  STRAIT_RETURN_IF_ERROR(OnWorkers([&](int w) -> absl::Status {
    const auto [first, rows] = Rows(n, w);
    if (rows == 0) return absl::OkStatus();
    STRAIT_ASSIGN_OR_RETURN(parts[w],
                            workers_[w].stage->Loss(microbatch, labels + first, grad_scale));
    return absl::OkStatus();
  }));
  LossResult sum;
  for (const LossResult& p : parts) {
    sum.loss_sum += p.loss_sum;
    sum.correct += p.correct;
  }
  return sum;
}

absl::Status ReplicaGroup::Backward(int microbatch, const float* grad_output, float* grad_input,
                                    bool last_of_step) {
  auto it = in_flight_.find(microbatch);
  if (it == in_flight_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("Backward(microbatch ", microbatch, ") without a Forward of that microbatch"));
  }
  const InFlight mb = it->second;
  in_flight_.erase(it);
  return OnWorkers([&](int w) {
    return BackwardOnWorker(w, microbatch, mb.rows, mb.step, grad_output, grad_input, last_of_step);
  });
}

absl::Status ReplicaGroup::BackwardOnWorker(int w, int microbatch, int n, int64_t step,
                                            const float* grad_output, float* grad_input,
                                            bool last_of_step) {
  const auto [first, rows] = Rows(n, w);
  Stage& stage = *workers_[w].stage;
  AllReducer* reducer =
      last_of_step && !reducers_.empty() ? reducers_[step % reducers_.size()].get() : nullptr;
  const bool reduce = reducer != nullptr;
  int next_bucket = 0;  // buckets become ready in increasing order
  absl::Status status;
  std::function<void(int)> layer_done;
  if (reduce) {
    layer_done = [&](int layer) {
      const int bucket = layer_bucket_[layer];
      if (bucket < 0) return;
      // The CPU reduction reads the arena directly: the backward's work must be done. (CUDA: the
      // NCCL reducer orders itself after the queued work without waiting.)
      if (device_ == DeviceKind::kCpu) status.Update(stage.backend().Sync());
      reducer->Ready(w, bucket);
      next_bucket = bucket + 1;
    };
  }
  if (rows > 0) {
    const int64_t in = input_features(), out = output_features();
    status.Update(
        stage.Backward(microbatch, grad_output != nullptr ? grad_output + first * out : nullptr,
                       grad_input != nullptr ? grad_input + first * in : nullptr, layer_done));
  }
  if (reduce) {
    // A worker without rows, or whose backward failed, still takes part in the round.
    while (next_bucket < num_buckets_) reducer->Ready(w, next_bucket++);
    status.Update(reducer->Finish(w));
  }
  return status;
}

void ReplicaGroup::Discard(int microbatch) {
  if (in_flight_.erase(microbatch) == 0) return;
  OnWorkers([&](int w) {
    workers_[w].stage->Discard(microbatch);
    return absl::OkStatus();
  }).IgnoreError();
}

void ReplicaGroup::ZeroGrad(int64_t step) {
  OnWorkers([&](int w) {
    workers_[w].stage->ZeroGrad(step);
    return absl::OkStatus();
  }).IgnoreError();
}

absl::StatusOr<double> ReplicaGroup::GradSumSquares(double downstream, int64_t step) {
  absl::StatusOr<double> sum;
  STRAIT_RETURN_IF_ERROR(OnWorker0([&](Stage& s) {
    sum = s.GradSumSquares(downstream, step);
    return sum.status();
  }));
  return sum;
}

absl::Status ReplicaGroup::OptimizerStep(int64_t step, float grad_scale) {
  return OnWorkers([&](int w) { return workers_[w].stage->OptimizerStep(step, grad_scale); });
}

template <class T>
absl::StatusOr<T> ReplicaGroup::FromWorker0(
    const std::function<absl::StatusOr<T>(const Stage&)>& fn) const {
  absl::StatusOr<T> out;
  STRAIT_RETURN_IF_ERROR(OnWorker0([&](Stage& s) {
    out = fn(s);
    return out.status();
  }));
  return out;
}

absl::StatusOr<std::vector<float>> ReplicaGroup::Params() const {
  return FromWorker0<std::vector<float>>([](const Stage& s) { return s.Params(); });
}

absl::StatusOr<std::vector<float>> ReplicaGroup::PreviousParams() const {
  return FromWorker0<std::vector<float>>([](const Stage& s) { return s.PreviousParams(); });
}

absl::StatusOr<std::vector<float>> ReplicaGroup::LookaheadParams() const {
  return FromWorker0<std::vector<float>>([](const Stage& s) { return s.LookaheadParams(); });
}

absl::StatusOr<std::vector<float>> ReplicaGroup::Grads(int64_t step) const {
  return FromWorker0<std::vector<float>>([step](const Stage& s) { return s.Grads(step); });
}

absl::StatusOr<std::vector<float>> ReplicaGroup::OptimizerState() const {
  return FromWorker0<std::vector<float>>([](const Stage& s) { return s.OptimizerState(); });
}

absl::Status ReplicaGroup::SetParams(absl::Span<const float> params) {
  return OnWorkers([&](int w) { return workers_[w].stage->SetParams(params); });
}

absl::Status ReplicaGroup::RestoreWeights(int64_t version, absl::Span<const float> newest,
                                          absl::Span<const float> previous,
                                          absl::Span<const float> lookahead) {
  return OnWorkers([&](int w) {
    return workers_[w].stage->RestoreWeights(version, newest, previous, lookahead);
  });
}

absl::Status ReplicaGroup::SetOptimizerState(absl::Span<const float> state) {
  return OnWorkers([&](int w) { return workers_[w].stage->SetOptimizerState(state); });
}

}  // namespace strait::collective
